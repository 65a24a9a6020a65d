package nccl_test

import (
	"fmt"
	"log"
	"unsafe"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/nccl/ncclfake"
)

// A trainer's host side of a vector in pinned memory: Write and Read move
// it to and from the GPU without a staging copy. It runs here on nccl's
// fake; on a GPU the device comes from nccl.Load(nccl.LoadOptions{}) and
// its Device(0).
func ExampleDevice_AllocPinned() {
	dev, err := ncclfake.New(ncclfake.Options{}).Device(0)
	if err != nil {
		log.Fatal(err)
	}
	host, err := dev.AllocPinned(4 * 4) // four float32
	if err != nil {
		log.Fatal(err)
	}
	defer dev.FreePinned(host)
	x := unsafe.Slice((*float32)(unsafe.Pointer(&host[0])), 4)
	copy(x, []float32{0.5, 1, 2, 4})

	buf, err := dev.Alloc(comm.F32, 4)
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Free(buf)
	if err := dev.Write(buf, host); err != nil { // straight from pinned memory
		log.Fatal(err)
	}
	clear(x)
	if err := dev.Read(host, buf); err != nil {
		log.Fatal(err)
	}
	fmt.Println(x)
	// Output: [0.5 1 2 4]
}
