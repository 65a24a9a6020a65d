// Package dp is data parallelism over any comm.Communicator, whatever the
// model: every rank holds the whole model, takes its share of each global
// batch, and averages its gradients with the others' before the same update,
// so the replicas stay bitwise identical. It works on the contract's
// buffers (comm.Buffer, any dtype), not on a framework's tensors:
//
//   - Broadcast gives every rank the root's parameters (the initial weights,
//     or the state after a Shrink).
//   - Reducer averages the gradients each step through persistent buckets,
//     as torch's DistributedDataParallel does: the gradients, in the reverse
//     of the order they are listed (backward produces the last layer's
//     first), are grouped into buckets of about Options.BucketBytes, each
//     bucket's memory is laid out once, and a step's AllReduces start as
//     their buckets' gradients are marked Ready, so they run while backward
//     computes the layers below; Wait ends the step. A step allocates
//     nothing in this package.
//   - Identical checks that every rank holds the same bits (a hash of the
//     parameters gathered to every rank), naming the ranks that differ.
//   - Shard cuts a global batch among the ranks so that every sample is
//     taken exactly once, for any number of ranks.
//
// dp/mnist loads the MNIST digits that the example trainers train on.
//
// dp imports comm and the standard library only.
package dp
