package topology

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
)

// Version is the version of the JSON dump that MarshalJSON writes and Load
// reads. A dump with another version is refused: a change of the format,
// including a new field, comes with a new version.
const Version = 1

// dumpOut is the JSON dump as written.
type dumpOut struct {
	Version int      `json:"version"`
	Members []Member `json:"members"`
	Nodes   []Node   `json:"nodes"`
}

// dumpIn is the JSON dump as read: pointers tell a missing field from a
// zero one, since a member's 0 (rank, local, device) means something.
type dumpIn struct {
	Version *int       `json:"version"`
	Members []memberIn `json:"members"`
	Nodes   []Node     `json:"nodes"`
}

type memberIn struct {
	Rank   *int    `json:"rank"`
	Host   *string `json:"host"`
	Local  *int    `json:"local"`
	Device *int    `json:"device"`
	Addr   string  `json:"addr"`
	Name   string  `json:"name"`
}

// MarshalJSON writes the dump:
//
//	{"version":1,"members":[...in rank order...],"nodes":[...in node order...]}
//
// The members are the whole of the topology; the nodes are derived from them
// and written for whoever reads the dump. The bytes are identical on every
// process that built the topology from the same member set.
func (t *Topology) MarshalJSON() ([]byte, error) {
	if t == nil {
		return []byte("null"), nil
	}
	return json.Marshal(dumpOut{Version: Version, Members: t.members, Nodes: t.nodes})
}

// UnmarshalJSON reads a dump as MarshalJSON writes it and validates it with
// New. Every member must give rank, host, local and device (device -1 for
// none); unknown fields are refused, so a typo is not silently dropped. If
// the dump lists nodes, they must be the ones its members make. It sets
// *t, so it is for decoding into a fresh Topology only: a Topology others
// hold is immutable.
func (t *Topology) UnmarshalJSON(data []byte) error {
	nt, err := decode(data)
	if err != nil {
		return err
	}
	*t = *nt
	return nil
}

// Load reads a JSON dump, as MarshalJSON writes it, from r and validates it
// with New. r must hold exactly one JSON value.
func Load(r io.Reader) (*Topology, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("topology: reading dump: %w", err)
	}
	return decode(data)
}

func decode(data []byte) (*Topology, error) {
	bad := func(format string, a ...any) (*Topology, error) {
		return nil, fmt.Errorf("topology: invalid dump: "+format, a...)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var d dumpIn
	if err := dec.Decode(&d); err != nil {
		return bad("%v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return bad("more data after the JSON object")
	}
	if d.Version == nil {
		return bad("no \"version\" (want %d)", Version)
	}
	if *d.Version != Version {
		return bad("version %d is not supported: this build reads version %d", *d.Version, Version)
	}
	if len(d.Members) == 0 {
		return bad("no \"members\"")
	}
	ms := make([]Member, len(d.Members))
	for i, m := range d.Members {
		for _, f := range []struct {
			name string
			ok   bool
		}{{"rank", m.Rank != nil}, {"host", m.Host != nil}, {"local", m.Local != nil}, {"device", m.Device != nil}} {
			if !f.ok {
				return bad("members[%d] has no %q (every member gives rank, host, local and device; device -1 for none)", i, f.name)
			}
		}
		ms[i] = Member{Rank: *m.Rank, Host: *m.Host, Local: *m.Local, Device: *m.Device, Addr: m.Addr, Name: m.Name}
	}
	t, err := New(ms)
	if err != nil {
		return nil, fmt.Errorf("topology: invalid dump: %w", err)
	}
	if d.Nodes != nil {
		if err := checkNodes(d.Nodes, t.nodes); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// checkNodes compares the nodes a dump lists with the ones its members make.
func checkNodes(got, want []Node) error {
	const fix = "the members are what counts: fix them, or drop \"nodes\" to have them derived"
	if len(got) != len(want) {
		return fmt.Errorf("topology: invalid dump: it lists %d nodes but its members make %d; %s", len(got), len(want), fix)
	}
	for i := range got {
		if got[i].Host != want[i].Host || !slices.Equal(got[i].Ranks, want[i].Ranks) {
			return fmt.Errorf("topology: invalid dump: nodes[%d] is host %q with ranks %v but the members make host %q with ranks %v; %s",
				i, got[i].Host, got[i].Ranks, want[i].Host, want[i].Ranks, fix)
		}
	}
	return nil
}
