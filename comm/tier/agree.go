package tier

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/hiercomm/hiercomm/comm"
)

// Field is one item of a configuration that every rank of a step must
// give alike (Agree): its name as the caller wrote it ("Net.Addrs",
// "Size"), and its value in any encoding that is equal exactly when the
// items are.
type Field struct {
	Name  string
	Value []byte
}

// FieldsDifferError is Agree's error when every rank passed but the
// ranks' values of some fields differ: every rank gets it, naming the
// same fields.
type FieldsDifferError struct {
	Fields []string // the names of the fields that differ, in the callers' order
}

func (e *FieldsDifferError) Error() string {
	return fmt.Sprintf("the ranks gave different %s (every rank must give the same)", strings.Join(e.Fields, ", "))
}

// agreeReason is the room a failed rank's error takes on its way to the
// others: longer ones are cut.
const agreeReason = 512

// Agree is a step that every rank of c takes with its own outcome (err;
// nil: it can go on) and its values of fields (the same names, in the
// same order, on every rank), and that ends alike on every rank: nil
// when no rank failed and every field is equal on every rank; else an
// error on every rank. A rank that failed gets its own err; the others
// get the error of the lowest rank that failed (its text, cut at 512
// bytes); with no rank failed, a *FieldsDifferError naming the fields
// that differ. A failure of the collectives themselves (a dead peer, the
// deadline) is returned as it is, joined with err.
//
// It costs an AllReduce of 8 + 16·len(fields) bytes, and a Broadcast of
// 512 bytes only when a rank failed. Values are compared by their FNV-1a
// hash: two different values agree by mistake with a chance of 2⁻⁶⁴.
func Agree(ctx context.Context, c comm.Communicator, err error, fields ...Field) error {
	// One AllReduce (max) of: the complement of the lowest rank that
	// failed (0: none), each field's hash and each hash's complement
	// (whose max is the complement of the min: a field agrees when its
	// max and min are equal).
	v := make([]uint64, 1+2*len(fields))
	if err != nil {
		v[0] = ^uint64(c.Rank())
	}
	for i, f := range fields {
		h := fnv.New64a()
		h.Write(f.Value)
		v[1+i] = h.Sum64()
		v[1+len(fields)+i] = ^v[1+i]
	}
	if aerr := c.AllReduce(ctx, comm.Host(v), comm.Host(v), comm.Max); aerr != nil {
		return errors.Join(err, fmt.Errorf("agreeing with the other ranks: %w", aerr))
	}
	if v[0] != 0 {
		failed := int(^v[0])
		if failed < 0 || failed >= c.Size() {
			return errors.Join(err, fmt.Errorf("agreeing with the other ranks: the lowest rank that failed is %d, not a rank of %d", failed, c.Size()))
		}
		reason := make([]byte, agreeReason)
		if failed == c.Rank() {
			copy(reason, err.Error())
		}
		if berr := c.Broadcast(ctx, comm.Host(reason), failed); berr != nil {
			return errors.Join(err, fmt.Errorf("hearing why rank %d failed: %w", failed, berr))
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("rank %d failed at this step: %s", failed, strings.ToValidUTF8(strings.TrimRight(string(reason), "\x00"), ""))
	}
	var differ []string
	for i, f := range fields {
		if v[1+i] != ^v[1+len(fields)+i] {
			differ = append(differ, f.Name)
		}
	}
	if differ != nil {
		return &FieldsDifferError{Fields: differ}
	}
	return nil
}
