package topology

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"testing/iotest"
)

func TestJSONRoundTrip(t *testing.T) {
	for _, c := range layouts {
		t.Run(c.name, func(t *testing.T) {
			top, err := New(c.members)
			if err != nil {
				t.Fatal(err)
			}
			data, err := json.Marshal(top)
			if err != nil {
				t.Fatal(err)
			}
			back, err := Load(bytes.NewReader(data))
			if err != nil {
				t.Fatalf("Load(%s): %v", data, err)
			}
			if !back.Equal(top) {
				t.Fatalf("Load(Marshal(t)) = %v, want %v", back, top)
			}
			// Through encoding/json too, as a field of something larger.
			var holder struct{ Topology *Topology }
			if err := json.Unmarshal([]byte(`{"Topology":`+string(data)+`}`), &holder); err != nil {
				t.Fatal(err)
			}
			if !holder.Topology.Equal(top) {
				t.Fatalf("json.Unmarshal = %v, want %v", holder.Topology, top)
			}
		})
	}
}

func TestJSONFormat(t *testing.T) {
	top, err := New([]Member{
		{Rank: 1, Host: "b", Local: 0, Device: 0, Addr: "10.0.0.2:4000", Name: "b-0"},
		{Rank: 0, Host: "a", Local: 0, Device: -1},
	})
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(top)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"version":1,"members":[{"rank":0,"host":"a","local":0,"device":-1},` +
		`{"rank":1,"host":"b","local":0,"device":0,"addr":"10.0.0.2:4000","name":"b-0"}],` +
		`"nodes":[{"host":"a","ranks":[0]},{"host":"b","ranks":[1]}]}`
	if string(data) != want {
		t.Errorf("json.Marshal =\n%s\nwant\n%s", data, want)
	}
}

func TestLoadWithoutNodes(t *testing.T) {
	top, err := Load(strings.NewReader(`{"version":1,"members":[
		{"rank":-1,"host":"node-10","local":0,"device":0},
		{"rank":-1,"host":"node-9","local":0,"device":0}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := top.Member(0).Host; got != "node-9" {
		t.Errorf("rank 0 is on host %q, want node-9", got)
	}
}

func TestLoadErrors(t *testing.T) {
	const m2 = `[{"rank":0,"host":"a","local":0,"device":0},{"rank":1,"host":"a","local":1,"device":1}]`
	for _, c := range []struct {
		name, in string
		want     []string
	}{
		{"not JSON", `version: 1`, []string{"invalid dump", "invalid character"}},
		{"empty", ``, []string{"invalid dump", "EOF"}},
		{"null", `null`, []string{`no "version"`}},
		{"array", `[]`, []string{"invalid dump", "cannot unmarshal array"}},
		{"no version", `{"members":` + m2 + `}`, []string{`no "version"`}},
		{"wrong version", `{"version":2,"members":` + m2 + `}`, []string{"version 2 is not supported", "reads version 1"}},
		{"no members", `{"version":1}`, []string{`no "members"`}},
		{"empty members", `{"version":1,"members":[]}`, []string{`no "members"`}},
		{"unknown field", `{"version":1,"members":` + m2 + `,"colour":3}`, []string{`unknown field "colour"`}},
		{"unknown member field", `{"version":1,"members":[{"rank":0,"host":"a","local":0,"device":0,"gpu":1}]}`,
			[]string{`unknown field "gpu"`}},
		{"member without device", `{"version":1,"members":[{"rank":0,"host":"a","local":0}]}`,
			[]string{`members[0] has no "device"`, "-1 for none"}},
		{"member without rank", `{"version":1,"members":[{"rank":0,"host":"a","local":0,"device":0},{"host":"a","local":1,"device":1}]}`,
			[]string{`members[1] has no "rank"`}},
		{"member without host", `{"version":1,"members":[{"rank":0,"local":0,"device":0}]}`,
			[]string{`members[0] has no "host"`}},
		{"member without local", `{"version":1,"members":[{"rank":0,"host":"a","device":0}]}`,
			[]string{`members[0] has no "local"`}},
		{"wrong type", `{"version":1,"members":[{"rank":"0","host":"a","local":0,"device":0}]}`,
			[]string{"invalid dump", "rank"}},
		{"duplicate rank", `{"version":1,"members":[{"rank":0,"host":"a","local":0,"device":0,"name":"p"},{"rank":0,"host":"b","local":0,"device":0,"name":"q"}]}`,
			[]string{"invalid dump", `member "p"`, `member "q"`, "both have rank 0"}},
		{"missing local index", `{"version":1,"members":[{"rank":0,"host":"a","local":1,"device":0}]}`,
			[]string{"invalid dump", `host "a" has local indices 1: 0 is missing`}},
		{"nodes disagree", `{"version":1,"members":` + m2 + `,"nodes":[{"host":"a","ranks":[1,0]}]}`,
			[]string{`nodes[0] is host "a" with ranks [1 0] but the members make host "a" with ranks [0 1]`}},
		{"too many nodes", `{"version":1,"members":` + m2 + `,"nodes":[{"host":"a","ranks":[0]},{"host":"b","ranks":[1]}]}`,
			[]string{"lists 2 nodes but its members make 1"}},
		{"trailing data", `{"version":1,"members":` + m2 + `} {}`, []string{"more data after the JSON object"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			top, err := Load(strings.NewReader(c.in))
			if err == nil {
				t.Fatalf("Load(%s) = %v, want an error", c.in, top)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			var u Topology
			if err2 := u.UnmarshalJSON([]byte(c.in)); err2 == nil || err2.Error() != err.Error() {
				t.Errorf("UnmarshalJSON = %v, Load = %v; want the same error", err2, err)
			}
		})
	}
}

func TestLoadReadError(t *testing.T) {
	boom := errors.New("disk on fire")
	_, err := Load(iotest.ErrReader(boom))
	if !errors.Is(err, boom) {
		t.Errorf("Load = %v, want an error wrapping %v", err, boom)
	}
}
