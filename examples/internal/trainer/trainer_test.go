package trainer

import (
	"slices"
	"testing"

	"github.com/hiercomm/hiercomm/dp/mnist"
)

func TestCheckRefusesBadConfigs(t *testing.T) {
	for name, mod := range map[string]func(*Config){
		"batch not a multiple of the ranks": func(c *Config) { c.Batch = 6 },
		"no epochs":                         func(c *Config) { c.Epochs = 0 },
		"negative steps":                    func(c *Config) { c.Steps = -1 },
		"unknown optimizer":                 func(c *Config) { c.Opt = "rmsprop" },
		"zero learning rate":                func(c *Config) { c.LR = 0 },
		"negative train":                    func(c *Config) { c.Train = -5 },
		"log 0":                             func(c *Config) { c.Log = 0 },
		"fake GPU without -device":          func(c *Config) { c.FakeGPU = true },
	} {
		c := Defaults()
		mod(&c)
		if err := c.Check(4); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := Defaults().Check(4); err != nil {
		t.Errorf("the defaults on 4 ranks: %v", err)
	}
}

// TestBatchesPartitionTheGlobalBatch: the ranks' shares of a step are
// disjoint and together the one process's batch of that step, in order.
func TestBatchesPartitionTheGlobalBatch(t *testing.T) {
	c := Defaults()
	c.Batch, c.Epochs, c.Steps = 12, 2, 0
	d := &Data{Train: &mnist.Set{Labels: make([]uint8, 40)}, cfg: c}
	if d.StepsPerEpoch() != 3 || d.TotalSteps() != 6 {
		t.Fatalf("%d steps per epoch, %d in all; want 3 and 6", d.StepsPerEpoch(), d.TotalSteps())
	}
	var whole [][]int
	for s := range d.Batches(0, 1) {
		whole = append(whole, slices.Clone(s.Idx))
	}
	const size = 3
	parts := make([][]int, len(whole))
	for r := range size {
		for s := range d.Batches(r, size) {
			if len(s.Idx) != c.Batch/size || s.Epoch != s.T/3 {
				t.Fatalf("rank %d step %d: %d samples in epoch %d", r, s.T, len(s.Idx), s.Epoch)
			}
			parts[s.T] = append(parts[s.T], s.Idx...)
		}
	}
	for st := range whole {
		if !slices.Equal(parts[st], whole[st]) {
			t.Fatalf("step %d: the ranks' shares %v are not the whole batch %v", st, parts[st], whole[st])
		}
	}
	if slices.Equal(whole[0], whole[3]) {
		t.Error("epochs 1 and 2 start with the same batch: the order is not reshuffled")
	}
}
