package bench

import (
	"bytes"
	"encoding/xml"
	"strings"
	"testing"
)

// TestWritePlot parses the SVG back: a polyline per operation, panel and
// communicator, the ceiling dashed on each bandwidth panel and in the
// legend, and the title escaped.
func TestWritePlot(t *testing.T) {
	res := tableResult([]string{"hier", "flat"})
	var b bytes.Buffer
	if err := WritePlot(&b, res, PlotOptions{Title: "4 ranks <2 nodes>", Ceiling: 0.0625, CeilingLabel: "link"}); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Polylines []struct {
			Stroke string `xml:"stroke,attr"`
			Points string `xml:"points,attr"`
		} `xml:"polyline"`
		Lines []struct {
			Dash string `xml:"stroke-dasharray,attr"`
		} `xml:"line"`
		Texts []string `xml:"text"`
	}
	if err := xml.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatalf("not XML: %v\n%s", err, b.String())
	}
	// allreduce: 2 communicators × (busbw, time); broadcast likewise.
	if len(doc.Polylines) != 8 {
		t.Errorf("%d polylines, want 8", len(doc.Polylines))
	}
	colors := map[string]bool{}
	for _, p := range doc.Polylines {
		colors[p.Stroke] = true
		if len(strings.Fields(p.Points)) == 0 {
			t.Error("an empty polyline")
		}
	}
	if len(colors) != 2 {
		t.Errorf("%d colours, want one per communicator", len(colors))
	}
	dashed := 0
	for _, l := range doc.Lines {
		if l.Dash != "" {
			dashed++
		}
	}
	if dashed != 3 { // the legend's, and one per bandwidth panel
		t.Errorf("%d dashed lines, want 3", dashed)
	}
	joined := strings.Join(doc.Texts, "|")
	for _, want := range []string{"4 ranks <2 nodes>", "link 0.0625 GB/s", "allreduce: bus bandwidth (GB/s)", "broadcast: time per call", "hier", "flat"} {
		if !strings.Contains(joined, want) {
			t.Errorf("no text %q in %s", want, joined)
		}
	}
}

func TestWriteCSV(t *testing.T) {
	var b bytes.Buffer
	if err := WriteCSV(&b, tableResult(nil)); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 5 || lines[0] != strings.Join(CSVHeader, ",") {
		t.Fatalf("CSV:\n%s", b.String())
	}
	if want := "broadcast,,1024,128,double,none,2,234.56,4.3656,4.3656,,128,0,,,,"; lines[4] != want {
		t.Errorf("broadcast line %q, want %q (no check, no in-place form: empty)", lines[4], want)
	}
	if !strings.HasPrefix(lines[3], "allreduce,,134217728,33554432,float,sum,-1,1.2345678e+06,") || !strings.HasSuffix(lines[3], ",123456.7,1.0872,1.6308,0") {
		t.Errorf("allreduce line %q", lines[3])
	}
}
