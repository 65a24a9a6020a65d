package hiercomm_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/hiercomm/hiercomm"
	"github.com/hiercomm/hiercomm/comm"
)

// Init joins the job its launcher describes and returns the World, a
// comm.Communicator that knows the topology. A real trainer passes
// hiercomm.Options{} and is started by `hiercomm run`, torchrun, srun or a
// Kubernetes Job; here an empty environment (Getenv) makes it a world of
// one process, which needs no launcher, and HIERCOMM_INTRA=shm keeps it on
// host memory on a GPU machine too.
func ExampleInit() {
	env := map[string]string{"HIERCOMM_INTRA": "shm"}
	ctx := context.Background()
	w, err := hiercomm.Init(ctx, hiercomm.Options{
		Getenv: func(k string) string { return env[k] },
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		fmt.Println(err) // names what is wrong: a variable, a seed, a missing rank
		return
	}
	defer w.Close()
	grads := []float32{0.5, -1, 2}
	if err := w.AllReduce(ctx, comm.Host(grads), comm.Host(grads), comm.Avg); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("rank %d of %d, %d node(s): %v\n", w.Rank(), w.Size(), w.Topology().NumNodes(), grads)
	// Output: rank 0 of 1, 1 node(s): [0.5 -1 2]
}
