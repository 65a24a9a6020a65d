package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/hiercomm/hiercomm/bench"
	"github.com/hiercomm/hiercomm/topology"
)

// runInfo is what rank 0 tells about a run before its first row.
type runInfo struct {
	Launcher string             `json:"launcher"` // who started the ranks, in words
	Ranks    int                `json:"ranks"`    // ranks of the world
	Nodes    int                `json:"nodes"`    // nodes of the world (0: unknown)
	Network  string             `json:"network"`
	Conns    int                `json:"conns_per_peer,omitempty"` // data connections between two ranks (0: the default, 1)
	Comms    []commInfo         `json:"comms"`                    // what is measured, in order
	Measured int                `json:"measured_ranks"`           // ranks of the measured communicators
	Split    string             `json:"split,omitempty"`
	Spec     bench.Spec         `json:"spec"`
	Topology *topology.Topology `json:"topology,omitempty"`
	Links    string             `json:"links,omitempty"` // how inter-node links are limited, in words
	LinkBits uint64             `json:"link_bits,omitempty"`
	Copy     []bench.CopyRow    `json:"copy,omitempty"`
	Raw      *rawTransport      `json:"raw_transport,omitempty"`
	Floor    *socketFloor       `json:"raw_socket,omitempty"`
	Started  time.Time          `json:"started"`
}

// fill copies the run's ceilings into res: nexar's frames and the
// machine's floor, as the summary judges them.
func (r runInfo) fill(res *bench.Result) {
	if r.Raw != nil {
		res.RawRTTUS, res.RawDoublingUS = r.Raw.RTTUS, r.Raw.DoublingUS
	}
	if r.Floor != nil {
		res.FloorRTTUS, res.FloorDoublingUS = r.Floor.RTTUS, r.Floor.DoublingUS
	}
}

// commInfo names one measured communicator and says what it is.
type commInfo struct {
	Name string `json:"name"`
	What string `json:"what"`
}

// names are the Result's communicator names (none for a lone unnamed one).
func (r runInfo) names() []string {
	if len(r.Comms) == 1 && r.Comms[0].Name == "" {
		return nil
	}
	var out []string
	for _, c := range r.Comms {
		out = append(out, c.Name)
	}
	return out
}

// printer turns a run's events into the output: the header, each
// operation's tables once its rows have come (bench.TableWriter), a status
// line on a terminal, and at the end the comparisons,
// the summary and the files. It is a sink; its methods may be called from
// any goroutine.
type printer struct {
	ctx  context.Context // bounds the work after the run (-simulate)
	mu   sync.Mutex      // guards everything below
	con  *console
	o    options
	log  *slog.Logger
	info *runInfo
	tw   *bench.TableWriter
	rows []bench.Row
	res  *bench.Result // the final result, once rank 0 has sent it

	// Progress: the weight of each planned row (about its share of the
	// run's time), how much of it is done, and the second phase.
	weights   []float64
	plan      []bench.Step
	measured  float64 // the weight of the rows measured
	phaseWhat string
	stopTick  chan struct{}
	tickDone  chan struct{}
}

func newPrinter(ctx context.Context, con *console, o options, log *slog.Logger) *printer {
	return &printer{ctx: ctx, con: con, o: o, log: log}
}

func (p *printer) start(info runInfo) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.info = &info
	var b strings.Builder
	writeHeader(&b, info)
	io.WriteString(p.con.stdout(), b.String())
	p.tw = bench.NewTableWriter(p.con.stdout(), info.Measured, info.Spec, info.names())
	steps, err := info.Spec.Plan(info.Measured)
	if err != nil {
		return
	}
	for _, s := range steps {
		for range max(len(info.Comms), 1) {
			p.plan = append(p.plan, s)
			p.weights = append(p.weights, 1+float64(s.Bytes)/(4<<20))
		}
	}
	if p.con.tty {
		p.stopTick, p.tickDone = make(chan struct{}), make(chan struct{})
		go p.tick()
	}
	p.showLocked()
}

func (p *printer) row(row bench.Row) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tw == nil {
		return
	}
	if k := len(p.rows); k < len(p.weights) {
		p.measured += p.weights[k]
	}
	p.rows = append(p.rows, row)
	if err := p.tw.Row(row); err != nil {
		p.log.Error("hiercomm-bench: writing a row", "err", err)
	}
	p.showLocked()
}

func (p *printer) phase(what string, steps int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tw != nil {
		p.tw.Close()
	}
	p.phaseWhat = fmt.Sprintf("%s (%d rows)", what, steps)
	p.showLocked()
}

func (p *printer) done(res bench.Result) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.res = &res
}

// tick redraws the status line every second (the elapsed time moves).
func (p *printer) tick() {
	defer close(p.tickDone)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-p.stopTick:
			return
		case <-t.C:
			p.mu.Lock()
			p.showLocked()
			p.mu.Unlock()
		}
	}
}

// showLocked sets the status line: what is being measured, how far the
// run is, and an estimate of the time left.
func (p *printer) showLocked() {
	if !p.con.tty || p.info == nil {
		return
	}
	elapsed := time.Since(p.info.Started)
	var s string
	k := len(p.rows)
	switch {
	case p.phaseWhat != "":
		s = fmt.Sprintf("measuring %s", p.phaseWhat)
	case k < len(p.plan):
		st := p.plan[k]
		on := ""
		if n := len(p.info.Comms); n > 1 {
			on = " on " + p.info.Comms[k%n].Name
		}
		s = fmt.Sprintf("measuring %s %s%s (row %d of %d)", st.Op, sizeWords(st.Bytes), on, k+1, len(p.plan))
	default:
		s = "finishing"
	}
	s += " · " + elapsed.Round(time.Second).String() + " elapsed"
	var total float64
	for _, w := range p.weights {
		total += w
	}
	if p.measured > 0 && p.phaseWhat == "" && k < len(p.plan) {
		left := time.Duration(float64(elapsed) * (total - p.measured) / p.measured)
		s += " · about " + left.Round(time.Second).String() + " left"
	}
	p.con.setStatus("hiercomm-bench: " + s)
}

// finish ends the output after the run: the open table's footer, what
// the run compared and the summary (when it completed), and the files. A
// run that failed or was interrupted still gets every row measured so far
// in its files, marked incomplete. It returns the exit status.
func (p *printer) finish(runErr error) int {
	if p.stopTick != nil {
		close(p.stopTick)
		<-p.tickDone
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.con.setStatus("")
	out := p.con.stdout()
	if p.tw != nil {
		p.tw.Close()
	}
	status := 0
	res := bench.Result{Rows: p.rows}
	if p.info != nil {
		res.Ranks, res.Spec, res.Comms, res.Nodes, res.Copy, res.Limiter = p.info.Measured, p.info.Spec, p.info.names(), p.info.Nodes, p.info.Copy, p.info.Links
		p.info.fill(&res)
	}
	complete := runErr == nil && p.res != nil
	if complete {
		res.Switch = p.res.Switch
		var b strings.Builder
		err := errors.Join(reportComparison(&b, res), bench.Summarize(res).Format(&b))
		if p.o.simulate && err == nil {
			err = writeSimulation(p.ctx, &b, res, *p.info, p.o.sim)
		}
		io.WriteString(out, b.String())
		if err != nil {
			p.log.Error("hiercomm-bench: writing the summary", "err", err)
			status = 1
		}
	} else if p.info != nil {
		fmt.Fprintf(out, "# Stopped before the end: %d of %d rows measured (above); %v\n", len(p.rows), len(p.plan), runErr)
	}
	if p.info != nil {
		if err := p.writeFiles(res, complete, runErr); err != nil {
			p.log.Error("hiercomm-bench: writing the output files", "err", err)
			status = 1
		}
	}
	if runErr != nil {
		p.log.Error("hiercomm-bench: the run did not finish", "err", runErr)
		return 1
	}
	w := res.Wrong()
	if res.Switch != nil {
		w = max(w, 0) + max(res.Switch.Wrong(), 0)
	}
	if w > 0 {
		p.log.Error("hiercomm-bench: wrong results", "elements", w, "hint", "the rows with #wrong > 0 name the operations and sizes")
		return 1
	}
	return status
}

// writeFiles writes -json, -csv and -plot.
func (p *printer) writeFiles(res bench.Result, complete bool, runErr error) error {
	var errs []error
	if p.o.jsonOut != "" {
		errs = append(errs, writeReport(p.o.jsonOut, newReport(*p.info, res, p.o, complete, runErr)))
	}
	if p.o.csvOut != "" {
		errs = append(errs, writeFile(p.o.csvOut, func(w io.Writer) error { return bench.WriteCSV(w, res) }))
	}
	if p.o.plotOut != "" {
		errs = append(errs, writeFile(p.o.plotOut, func(w io.Writer) error {
			ceiling, label := ceilingGBs(*p.info, res)
			return bench.WritePlot(w, res, bench.PlotOptions{Title: plotTitle(*p.info), Ceiling: ceiling, CeilingLabel: label})
		}))
	}
	return errors.Join(errs...)
}

// writeHeader is the lines before the first table: the run, its
// topology as a table, the communicators measured and the ceilings.
func writeHeader(b *strings.Builder, info runInfo) {
	fmt.Fprintf(b, "# hiercomm-bench %s, %s: %d ranks", version(), goVersion(), info.Ranks)
	if info.Nodes > 0 {
		fmt.Fprintf(b, " on %s", plural(info.Nodes, "node"))
	}
	fmt.Fprintf(b, ", %s", info.Network)
	if info.Conns > 1 {
		fmt.Fprintf(b, " (%d connections per pair of ranks)", info.Conns)
	}
	fmt.Fprintf(b, ", started by %s\n", info.Launcher)
	if info.Topology != nil {
		writeTopology(b, info.Topology)
	}
	if info.Split != "" {
		what := map[string]string{splitIntra: "within each node (every node measures its own communicator at once; the rows are node 0's)",
			splitInter: "across nodes, one rank per node (every local rank's rail measures at once; the rows are rail 0's)"}[info.Split]
		fmt.Fprintf(b, "# Split: measuring only %s\n", what)
	}
	b.WriteString("# Measured:\n")
	for _, c := range info.Comms {
		name := c.Name
		if name == "" {
			name = "-"
		}
		fmt.Fprintf(b, "#   %-6s %s\n", name, c.What)
	}
	if info.Links != "" {
		fmt.Fprintf(b, "# Inter-node links: %s\n", info.Links)
	}
	if f := info.Floor; f != nil {
		fmt.Fprintf(b, "# The machine's floor: raw TCP sockets (8 bytes by blocking write(2) and read(2), no frames) between rank %d and rank %d: round trip %.1f us (median of %d)",
			f.From, f.To, f.RTTUS, rawPings)
		if f.StreamGBs > 0 {
			fmt.Fprintf(b, ", one way %.3f GB/s (1 MiB messages back to back)", f.StreamGBs)
		}
		b.WriteString("\n")
		if f.DoublingUS > 0 {
			fmt.Fprintf(b, "# The machine's floor among all %d ranks at once: an 8-byte recursive-doubling exchange over raw sockets (log2 %d rounds) %.1f us (median of %d)\n",
				f.DoublingRanks, f.DoublingRanks, f.DoublingUS, rawPings)
		}
	}
	if r := info.Raw; r != nil {
		fmt.Fprintf(b, "# nexar's own frames (%s, no communicator) between rank %d and rank %d: 8-byte round trip %.1f us (median of %d), one way %.3f GB/s (1 MiB frames)",
			r.Network, r.From, r.To, r.RTTUS, rawPings, r.StreamGBs)
		if r.BurstUS > 0 {
			fmt.Fprintf(b, ", %.2f us per 8-byte frame sent back to back (%d)", r.BurstUS, rawBurst)
		}
		b.WriteString("\n")
		if r.DoublingUS > 0 {
			fmt.Fprintf(b, "# nexar's own frames among all %d ranks at once: an 8-byte recursive-doubling exchange (log2 %d rounds) %.1f us (median of %d)\n",
				r.DoublingRanks, r.DoublingRanks, r.DoublingUS, rawPings)
		}
	}
	if len(info.Copy) > 0 {
		b.WriteString("# Memory copy, one thread:")
		for _, c := range info.Copy {
			fmt.Fprintf(b, " %s %.2f GB/s", bench.FormatSize(c.Bytes), c.GBs)
		}
		b.WriteString("\n")
	}
	b.WriteString("#\n")
}

// writeTopology prints the topology as tables: one line per node, then one
// per rail.
func writeTopology(b *strings.Builder, t *topology.Topology) {
	g, same := t.RanksPerNode()
	per := plural(g, "rank") + " per node"
	if !same {
		per = "different numbers of ranks per node"
	}
	fmt.Fprintf(b, "# Topology: %s on %s, %s\n", plural(t.Size(), "rank"), plural(t.NumNodes(), "node"), per)
	fmt.Fprintf(b, "#   %4s  %-16s  %-16s  %s\n", "node", "host", "ranks", "devices")
	for i, n := range t.Nodes() {
		var ranks, devs []string
		for _, r := range n.Ranks {
			ranks = append(ranks, fmt.Sprint(r))
			if d := t.Member(r).Device; d >= 0 {
				devs = append(devs, fmt.Sprint(d))
			}
		}
		dev := "none (CPU)"
		if len(devs) > 0 {
			dev = "GPU " + strings.Join(devs, " ")
		}
		fmt.Fprintf(b, "#   %4d  %-16s  %-16s  %s\n", i, n.Host, strings.Join(ranks, " "), dev)
	}
	if t.NumNodes() > 1 && same && g > 1 {
		fmt.Fprintf(b, "#   %4s  %s\n", "rail", "ranks (local rank l of every node; one network link each)")
		for l, rail := range t.Rails() {
			var ranks []string
			for _, r := range rail {
				ranks = append(ranks, fmt.Sprint(r))
			}
			fmt.Fprintf(b, "#   %4d  %s\n", l, strings.Join(ranks, " "))
		}
	}
}

// plotTitle is the -plot image's title: the run in a few words.
func plotTitle(info runInfo) string {
	s := "hiercomm-bench: " + plural(info.Measured, "rank")
	if info.Measured != info.Ranks {
		s += " of " + plural(info.Ranks, "rank")
	}
	if info.Nodes > 0 {
		s += " on " + plural(info.Nodes, "node")
	}
	s += ", " + info.Network
	if info.Conns > 1 {
		s += fmt.Sprintf(" ×%d connections", info.Conns)
	}
	if info.LinkBits > 0 {
		s += fmt.Sprintf(", inter-node links limited to %s each way", strings.TrimSuffix(cFloatGB(float64(info.LinkBits)/8/1e9), ".0")+" GB/s")
	}
	return s
}

// ceilingGBs is the dashed line of the plot's bandwidth panels: each
// inter-node link's limit when the run limited them, else the best
// sendrecv busbw the run measured (the transport's own ceiling), else none.
func ceilingGBs(info runInfo, res bench.Result) (float64, string) {
	if info.LinkBits > 0 {
		return float64(info.LinkBits) / 8 / 1e9, "inter-node link limit"
	}
	best := 0.0
	for _, row := range res.Rows {
		if row.Op == "sendrecv" {
			best = max(best, row.BusBW)
		}
	}
	return best, "best sendrecv busbw"
}

func cFloatGB(v float64) string { return fmt.Sprintf("%.4g", v) }

// plural is "1 node", "2 nodes".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// sizeWords is a byte size for people: "8 B", "64 KiB", "1.5 MiB".
func sizeWords(n int64) string {
	for _, u := range []struct {
		unit string
		size int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.size {
			return strings.TrimSuffix(fmt.Sprintf("%.1f", float64(n)/float64(u.size)), ".0") + " " + u.unit
		}
	}
	return fmt.Sprintf("%d B", n)
}
