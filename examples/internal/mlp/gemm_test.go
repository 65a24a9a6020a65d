package mlp

import (
	"math/rand/v2"
	"testing"
)

func randSlice(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(r.NormFloat64())
	}
	return s
}

// TestGemmNTMatchesDot checks every tile shape and edge (m, n not
// multiples of the tile, k = 0) bit for bit against the plain dot product
// in order, which is the kernel's contract.
func TestGemmNTMatchesDot(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, sz := range [][3]int{{1, 1, 1}, {4, 2, 3}, {7, 5, 0}, {9, 67, 33}, {130, 131, 64}, {33, 200, 1000}} {
		m, n, k := sz[0], sz[1], sz[2]
		a, b := randSlice(r, m*k), randSlice(r, n*k)
		c := randSlice(r, m*n)
		base := append([]float32(nil), c...)
		gemmNT(0, m, n, k, a, b, c, n, true)
		for i := range m {
			for j := range n {
				if want := base[i*n+j] + dot(a[i*k:(i+1)*k], b[j*k:(j+1)*k]); c[i*n+j] != want {
					t.Fatalf("%v: C[%d,%d] = %v, want %v", sz, i, j, c[i*n+j], want)
				}
			}
		}
		gemmNT(0, m, n, k, a, b, c, n, false)
		for i := range m {
			for j := range n {
				if want := dot(a[i*k:(i+1)*k], b[j*k:(j+1)*k]); c[i*n+j] != want {
					t.Fatalf("%v (set): C[%d,%d] = %v, want %v", sz, i, j, c[i*n+j], want)
				}
			}
		}
	}
}

func TestTranspose(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	m, n := 37, 70
	a := randSlice(r, m*n)
	tr := make([]float32, m*n)
	transpose(m, n, a, tr)
	for i := range m {
		for j := range n {
			if tr[j*m+i] != a[i*n+j] {
				t.Fatalf("t[%d,%d] = %v, want %v", j, i, tr[j*m+i], a[i*n+j])
			}
		}
	}
}

func BenchmarkGemmNT(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	m, n, k := 128, 256, 1024
	x, y, c := randSlice(r, m*k), randSlice(r, n*k), make([]float32, m*n)
	b.SetBytes(int64(2 * m * n * k)) // "MB/s" reads as Mflop/s
	for b.Loop() {
		gemmNT(0, m, n, k, x, y, c, n, false)
	}
}
