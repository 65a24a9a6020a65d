// Package bench measures collectives the way nccl-tests does, on any
// comm.Communicator: the flat nexar one, shared memory, NCCL or the
// hierarchical one. Every rank calls Run with the same Spec; the sizes are
// swept from MinBytes to MaxBytes, out of place and in place, each size's
// time combines the ranks' as nccl-tests -a does (the mean by default), and
// the table is printed in nccl-tests' layout,
// so its parsers and habits carry over: algbw = bytes / time and
// busbw = algbw × a per-collective factor that makes the figures comparable
// with the link's bandwidth.
//
// RunCompare measures several communicators of the same ranks interleaved
// (the hierarchical one and its flat world), and HierGoals, FormatTraffic
// and Crossover read such a run; Link models a rate-limited inter-node
// link where emulated NICs are not available.
//
// Summarize turns one run into the ratios the project's speed goals are
// stated in (AllReduce bus bandwidth against the transport's own ceiling,
// small-message AllReduce latency against the ideal number of hops).
//
// TableWriter prints each operation's rows as nccl-tests' tables, one per
// communicator, as soon as the operation is measured; WriteCSV and WritePlot
// (an SVG, standard library only) write a run's rows. Simulate runs the
// schedules of comm/schedule for thousands of ranks under an α-β model
// (SimModel, fitted from a run's sendrecv by FitAlphaBeta, with
// FitCacheBeta for the calls whose buffers stay in the caches), and
// PredictFlat, PredictHier and ModelError predict collectives from them.
//
// bench imports comm, comm/schedule and the standard library only; it
// never builds a communicator itself (cmd/hiercomm-bench does).
package bench
