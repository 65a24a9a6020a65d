package bench

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzLoadConfig feeds LoadConfig arbitrary JSON (a -config file): no
// panic; a config it accepts writes back to JSON that loads to the same
// config; its Spec, when it validates, sweeps at most 63 sizes, each
// within [MinBytes, MaxBytes], so nothing is sized before it is checked.
func FuzzLoadConfig(f *testing.F) {
	for _, s := range []string{
		`{"ranks":4,"nodes":2,"network":"quic","ops":["allreduce","allgather"],"minBytes":"8","maxBytes":"64M","factor":4,"dtype":"f32","redop":"sum","budget":"50ms","check":true,"linkRate":"500mbit","switchFrom":"16K","switchTo":"1M","timeout":"10m"}`,
		`{"minBytes":1,"maxBytes":"4611686018427387904","factor":2}`,
		`{"maxBytes":"4G","factor":1}`,
		`{"dtype":"i32","redop":"avg","ops":["reducescatter"]}`,
		`{"ranks":2} {"ranks":3}`,
		`{"unknown":1}`,
		`{"budget":50}`,
		`{"minBytes":"9999999999G"}`,
		`{"root":3}`,
		`{"minBytes":1,"maxBytes":"1G","stepBytes":1}`,
		`{"minBytes":"1M","maxBytes":"8M","stepBytes":"1M","average":"max","inplace":true}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var c Config
		if err := LoadConfig(bytes.NewReader(b), &c); err != nil {
			return
		}
		again, err := json.Marshal(c)
		if err != nil {
			t.Fatalf("an accepted config does not marshal: %v", err)
		}
		var back Config
		if err := LoadConfig(bytes.NewReader(again), &back); err != nil {
			t.Fatalf("the config written back does not load: %v\n%s", err, again)
		}
		if !reflect.DeepEqual(normal(back), normal(c)) {
			t.Fatalf("round trip changed the config:\n%+v\n%+v", c, back)
		}
		spec, err := c.Spec()
		if err != nil {
			return
		}
		s, err := spec.withDefaults(4)
		if err != nil {
			return
		}
		sizes := s.sizes()
		if most := 63; len(sizes) == 0 || (s.StepBytes == 0 && len(sizes) > most) || len(sizes) > MaxLinearSizes {
			t.Fatalf("%d sizes for %d … %d by %d (step %d)", len(sizes), s.MinBytes, s.MaxBytes, s.Factor, s.StepBytes)
		}
		for _, n := range sizes {
			if n < s.MinBytes || n > s.MaxBytes {
				t.Fatalf("size %d outside [%d, %d]", n, s.MinBytes, s.MaxBytes)
			}
		}
	})
}

// normal makes configs comparable: an empty list and no list are alike.
func normal(c Config) Config {
	if len(c.Ops) == 0 {
		c.Ops = nil
	}
	return c
}
