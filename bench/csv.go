package bench

import (
	"encoding/csv"
	"io"
	"strconv"
)

// CSVHeader is the first line WriteCSV writes: one column per field of a
// row, the out-of-place form's then the in-place form's (empty where the
// operation has none), #wrong empty where not checked.
var CSVHeader = []string{
	"op", "comm", "size_bytes", "count", "type", "redop", "root",
	"time_us", "algbw_gbs", "busbw_gbs", "wrong", "iters", "repeats",
	"inplace_time_us", "inplace_algbw_gbs", "inplace_busbw_gbs", "inplace_wrong",
}

// WriteCSV writes r's rows as CSV, with CSVHeader first.
func WriteCSV(w io.Writer, r Result) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(CSVHeader); err != nil {
		return err
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	wrong := func(n int64) string {
		if n < 0 {
			return ""
		}
		return strconv.FormatInt(n, 10)
	}
	for _, row := range r.Rows {
		redop := "none"
		if row.RedOp != 0 {
			redop = row.RedOp.String()
		}
		rec := []string{row.Op, row.Comm, strconv.FormatInt(row.Bytes, 10), strconv.FormatInt(row.Count, 10), NCCLTypeName(row.DType), redop, strconv.Itoa(row.Root),
			f(row.TimeUS), f(row.AlgBW), f(row.BusBW), wrong(row.Wrong), strconv.Itoa(row.Iters), strconv.Itoa(row.Repeats), "", "", "", ""}
		if in := row.InPlace; in != nil {
			copy(rec[13:], []string{f(in.TimeUS), f(in.AlgBW), f(in.BusBW), wrong(in.Wrong)})
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}
