package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/hiercomm/hiercomm/comm"
)

// Config is the JSON form of a benchmark run, as cmd/hiercomm-bench reads
// it (its embedded default and -config files): a Spec in words, plus where
// to run it. Fields absent from a file keep the value they had, so a file
// overrides only what it names. The zero value of a field means the Spec's
// default for it.
type Config struct {
	// Ranks is the number of ranks (processes, or goroutines in process).
	Ranks int `json:"ranks"`
	// Nodes is the number of emulated nodes the processes are spread over
	// (cluster.StartLocal: node n is 127.0.0.(n+1)); Ranks must be a
	// multiple of it. Ignored in process. If zero, 1.
	Nodes int `json:"nodes"`
	// Network is the transport between the ranks: "quic", "quic-only" or
	// "tcp" ("memory" for ranks in one process only).
	Network string `json:"network"`
	// Conns is the number of data connections between each pair of
	// processes (launchenv.Launch.ConnsPerPeer, HIERCOMM_CONNS_PER_PEER):
	// frames to a peer are spread over them. If zero, the transport's
	// default (1).
	Conns int `json:"conns"`
	// InProcess runs the ranks as goroutines of one process, as one flat
	// nexar world (no hiercomm.Init: no membership, shared memory or
	// hierarchy), over the in-memory transport (Network "memory") or
	// loopback sockets.
	InProcess bool `json:"inprocess"`
	// Ops, MinBytes, MaxBytes, Factor, Root, Warmup, Iters, Repeats, Budget
	// and Check are the Spec's fields of the same names. Sizes are numbers
	// of bytes or strings with a K, M or G suffix ("64M"); Budget is a Go
	// duration ("50ms").
	Ops      []string `json:"ops"`
	MinBytes Size     `json:"minBytes"`
	MaxBytes Size     `json:"maxBytes"`
	Factor   int      `json:"factor"`
	// StepBytes, if set, steps the sizes linearly (nccl-tests -i).
	StepBytes Size     `json:"stepBytes"`
	DType     string   `json:"dtype"` // "f32", "bf16", … or nccl-tests' "float", "bfloat16", … (ParseDType)
	RedOp     string   `json:"redop"` // comm.ReduceOp's name: "sum", "max", …
	Root      int      `json:"root"`
	Warmup    int      `json:"warmup"`
	Iters     int      `json:"iters"`
	Repeats   int      `json:"repeats"`
	Budget    Duration `json:"budget"`
	Check     bool     `json:"check"`
	// InPlace also measures the in-place form of each operation that has
	// one (Spec.InPlace).
	InPlace bool `json:"inplace"`
	// Average is how the ranks' times combine: "avg" (the mean, the
	// default), "rank0", "min" or "max" (ParseAverage; nccl-tests -a).
	Average string `json:"average"`
	// LinkRate limits every inter-node link of a multi-node process run
	// to this rate each way, tc style ("1gbit", "500mbit"): with emulated
	// NICs (network namespaces, veth, tbf) when this process is root and
	// they are available, otherwise with a rate-limiting wrapper around
	// the inter-node communicators (Link). Empty or "off": loopback,
	// unlimited.
	LinkRate string `json:"linkRate"`
	// SwitchFrom and SwitchTo bound the sizes at which a hierarchical run
	// also measures the AllReduce's latency path against its 2D path
	// (hierarchy.Config.SmallBytes forced either way). If zero, that
	// measurement is skipped.
	SwitchFrom Size `json:"switchFrom"`
	SwitchTo   Size `json:"switchTo"`
	// Timeout bounds the whole run. If zero, there is no bound but the
	// communicator's own per-collective timeout.
	Timeout Duration `json:"timeout"`
}

// LoadConfig reads a JSON Config from r on top of *c: the fields r names
// replace those of *c. A field that Config does not have is an error (a
// misspelt name would otherwise be silently ignored).
func LoadConfig(r io.Reader, c *Config) error {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	next := *c
	if err := dec.Decode(&next); err != nil {
		return fmt.Errorf("bench config: %w", err)
	}
	if dec.More() {
		return fmt.Errorf("bench config: more than one JSON value")
	}
	*c = next
	return nil
}

// Spec is the Spec c describes (without checking it against a world size;
// Spec.Validate does).
func (c Config) Spec() (Spec, error) {
	s := Spec{
		Ops: c.Ops, MinBytes: int64(c.MinBytes), MaxBytes: int64(c.MaxBytes), Factor: c.Factor, StepBytes: int64(c.StepBytes),
		Root: c.Root, Warmup: c.Warmup, Iters: c.Iters, Repeats: c.Repeats, Budget: time.Duration(c.Budget), Check: c.Check,
		InPlace: c.InPlace,
	}
	var err error
	if c.DType != "" {
		if s.DType, err = ParseDType(c.DType); err != nil {
			return Spec{}, err
		}
	}
	if s.Average, err = ParseAverage(c.Average); err != nil {
		return Spec{}, err
	}
	if c.RedOp != "" {
		if s.Op, err = comm.ParseReduceOp(c.RedOp); err != nil {
			return Spec{}, err
		}
	}
	return s, nil
}

// Filled is spec as Run measures it on a communicator of size ranks: every
// default filled in, or the error Run would return.
func (spec Spec) Filled(size int) (Spec, error) { return spec.withDefaults(size) }

// ParseDType reads an element type by hiercomm's name ("f32", "bf16", …)
// or nccl-tests' ("float", "bfloat16", "half", "double", "int32", "int", …).
func ParseDType(s string) (comm.DType, error) {
	if s == "int" {
		return comm.I32, nil
	}
	for dt, name := range ncclTypeNames {
		if s == name {
			return dt, nil
		}
	}
	dt, err := comm.ParseDType(s)
	if err != nil {
		return 0, fmt.Errorf("unknown element type %q (want float, double, half, bfloat16, int8, uint8, int32, uint32, int64, uint64, or f32, f64, f16, bf16, i8, …)", s)
	}
	return dt, nil
}

// ParseAverage reads Config.Average: "" or "avg", "rank0", "min", "max".
func ParseAverage(s string) (Average, error) {
	switch s {
	case "", "avg":
		return AvgRanks, nil
	case "rank0":
		return Rank0Time, nil
	case "min":
		return MinRanks, nil
	case "max":
		return MaxRanks, nil
	}
	return 0, fmt.Errorf("unknown average %q (want avg, rank0, min or max)", s)
}

// Name is a's name in Config.Average.
func (a Average) Name() string {
	return [...]string{"avg", "rank0", "min", "max"}[a]
}

// Validate reports whether Run would accept spec on a communicator of size
// ranks, so a launcher can refuse a bad Spec before it starts any process.
func (spec Spec) Validate(size int) error {
	_, err := spec.withDefaults(size)
	return err
}

// Size is a byte count that JSON may give as a number or as a string with a
// K, M or G suffix (see ParseSize).
type Size int64

// UnmarshalJSON implements json.Unmarshaler.
func (s *Size) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	var str string
	if len(b) > 0 && b[0] == '"' {
		if err := json.Unmarshal(b, &str); err != nil {
			return err
		}
	} else {
		str = string(b)
	}
	v, err := ParseSize(str)
	if err != nil {
		return err
	}
	*s = Size(v)
	return nil
}

// MarshalJSON writes the size as ParseSize reads it ("64M").
func (s Size) MarshalJSON() ([]byte, error) {
	return json.Marshal(FormatSize(int64(s)))
}

// Duration is a time.Duration that JSON gives as a Go duration string
// ("50ms", "10m").
type Duration time.Duration

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var str string
	if err := json.Unmarshal(b, &str); err != nil {
		return fmt.Errorf("a duration is a string such as \"50ms\": %w", err)
	}
	v, err := time.ParseDuration(str)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the duration as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return []byte(strconv.Quote(time.Duration(d).String())), nil
}
