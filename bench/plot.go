package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// Plot geometry, in SVG user units (pixels).
const (
	plotPanelW = 420 // one panel's plotting area
	plotPanelH = 220
	plotLeft   = 70 // room for the y labels
	plotGap    = 110
	plotTop    = 60
	plotRowH   = plotPanelH + 80
	plotWidth  = 2*(plotLeft+plotPanelW) + plotGap - plotLeft + 30
)

// plotColors are the communicators' colours, in order (colour-blind safe).
var plotColors = []string{"#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9"}

// PlotOptions are what WritePlot draws besides the rows.
type PlotOptions struct {
	Title string
	// Ceiling, if positive, is drawn as a dashed line on the bandwidth
	// panels (GB/s: what one link carries each way, say), and named in
	// the legend by CeilingLabel (if empty, "ceiling").
	Ceiling      float64
	CeilingLabel string
}

// WritePlot draws r as an SVG image: for each operation, bus bandwidth
// (left) and time (right) against size, every axis logarithmic, one line
// per communicator (out-of-place form), and the ceiling dashed. It uses
// nothing but the standard library.
func WritePlot(w io.Writer, r Result, opt PlotOptions) error {
	title, ceilingGBs := opt.Title, opt.Ceiling
	label := opt.CeilingLabel
	if label == "" {
		label = "ceiling"
	}
	var ops []string
	comms := r.Comms
	if len(comms) == 0 {
		comms = []string{""}
	}
	for _, t := range r.tables() {
		if !slices.Contains(ops, t.op) {
			ops = append(ops, t.op)
		}
	}
	height := plotTop + len(ops)*plotRowH + 20
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		plotWidth, height, plotWidth, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", plotLeft, xmlText(title))
	// The legend: one entry per communicator, and the ceiling.
	x := plotLeft
	for i, c := range comms {
		name := c
		if name == "" {
			name = "measured"
		}
		fmt.Fprintf(&b, `<line x1="%d" y1="40" x2="%d" y2="40" stroke="%s" stroke-width="2.5"/><text x="%d" y="44">%s</text>`+"\n",
			x, x+24, plotColors[i%len(plotColors)], x+30, xmlText(name))
		x += 40 + 8*len(name)
	}
	if ceilingGBs > 0 {
		fmt.Fprintf(&b, `<line x1="%d" y1="40" x2="%d" y2="40" stroke="#444" stroke-width="1.5" stroke-dasharray="6,4"/><text x="%d" y="44">%s %s GB/s</text>`+"\n",
			x, x+24, x+30, xmlText(label), cFloat(ceilingGBs))
	}
	for i, op := range ops {
		top := plotTop + i*plotRowH + 20
		var bw, us []plotLine
		for j, c := range comms {
			var lb, lt plotLine
			lb.color, lt.color = plotColors[j%len(plotColors)], plotColors[j%len(plotColors)]
			for _, row := range r.rowsOn(op, c) {
				lb.pts = append(lb.pts, [2]float64{float64(row.Bytes), row.BusBW})
				lt.pts = append(lt.pts, [2]float64{float64(row.Bytes), row.TimeUS})
			}
			bw, us = append(bw, lb), append(us, lt)
		}
		plotPanel(&b, plotLeft, top, op+": bus bandwidth (GB/s)", bw, ceilingGBs, formatGBs)
		plotPanel(&b, plotLeft+plotPanelW+plotGap, top, op+": time per call", us, 0, formatUS)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// plotLine is one communicator's points (size, value) on a panel.
type plotLine struct {
	color string
	pts   [][2]float64
}

// plotPanel draws one panel with its top-left corner at (x0, y0): log-log
// axes fitted to the positive points (and the ceiling), grid lines at
// powers of ten (y) and of 4 (x), and a polyline per line.
func plotPanel(b *strings.Builder, x0, y0 int, title string, lines []plotLine, ceiling float64, ylabel func(float64) string) {
	xmin, xmax, ymin, ymax := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, l := range lines {
		for _, p := range l.pts {
			if p[0] > 0 && p[1] > 0 {
				xmin, xmax = min(xmin, p[0]), max(xmax, p[0])
				ymin, ymax = min(ymin, p[1]), max(ymax, p[1])
			}
		}
	}
	if ceiling > 0 {
		ymin, ymax = min(ymin, ceiling), max(ymax, ceiling)
	}
	fmt.Fprintf(b, `<text x="%d" y="%d" font-weight="bold">%s</text>`+"\n", x0, y0-8, xmlText(title))
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#888"/>`+"\n", x0, y0, plotPanelW, plotPanelH)
	if math.IsInf(xmin, 1) {
		fmt.Fprintf(b, `<text x="%d" y="%d">no data</text>`+"\n", x0+plotPanelW/2-25, y0+plotPanelH/2)
		return
	}
	// Axes in log2 (x) and log10 (y), padded to whole units.
	lx0, lx1 := math.Floor(math.Log2(xmin)), math.Ceil(math.Log2(xmax))
	if lx1 == lx0 {
		lx1++
	}
	ly0, ly1 := math.Floor(math.Log10(ymin)), math.Ceil(math.Log10(ymax))
	if ly1 == ly0 {
		ly1++
	}
	px := func(v float64) float64 { return float64(x0) + (math.Log2(v)-lx0)/(lx1-lx0)*plotPanelW }
	py := func(v float64) float64 { return float64(y0+plotPanelH) - (math.Log10(v)-ly0)/(ly1-ly0)*plotPanelH }
	step := math.Max(2, 2*math.Ceil((lx1-lx0)/16)) // x ticks every 2^step, at most 8 of them
	for e := math.Ceil(lx0/step) * step; e <= lx1; e += step {
		x := px(math.Exp2(e))
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/><text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n",
			x, y0, x, y0+plotPanelH, x, y0+plotPanelH+16, FormatSize(int64(math.Exp2(e))))
	}
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle">size (bytes)</text>`+"\n", x0+plotPanelW/2, y0+plotPanelH+34)
	for e := ly0; e <= ly1; e++ {
		y := py(math.Pow(10, e))
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n",
			x0, y, x0+plotPanelW, y, x0-6, y+4, ylabel(math.Pow(10, e)))
	}
	if ceiling > 0 {
		y := py(ceiling)
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#444" stroke-width="1.5" stroke-dasharray="6,4"/>`+"\n", x0, y, x0+plotPanelW, y)
	}
	for _, l := range lines {
		var pts []string
		for _, p := range l.pts {
			if p[0] > 0 && p[1] > 0 {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(p[0]), py(p[1])))
			}
		}
		if len(pts) > 0 {
			fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", l.color, strings.Join(pts, " "))
		}
	}
}

// formatGBs labels a power of ten of GB/s.
func formatGBs(v float64) string { return strings.TrimSuffix(cFloat(v), ".0") }

// formatUS labels a power of ten of microseconds in the unit that reads best.
func formatUS(v float64) string {
	switch {
	case v >= 1e6:
		return cFloat(v/1e6) + " s"
	case v >= 1e3:
		return cFloat(v/1e3) + " ms"
	}
	return cFloat(v) + " µs"
}

// xmlText escapes s for SVG text.
func xmlText(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}
