package shm

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// segment is one rank's mapping of a communicator's file in /dev/shm.
//
// Lifecycle: the communicator's rank 0 creates the file without a name
// (O_TMPFILE; a temporary name where that is not available), sizes and
// initializes it, and links it to its final name, so the final name only
// ever shows an initialized segment and an existing one is an error (as
// with O_EXCL). The other ranks open and map it; every rank
// registers its process in its control block; once all have, the file is
// unlinked: the mapping lives on, and a crash from then on cannot leak it.
// A file left by a job that died before that is stale: the next rank 0 to
// create the name removes it when no process that had it is alive.
type segment struct {
	mem     []byte
	l       layout
	path    string
	id      fileID
	created bool // this rank made the file, and removes it if setup fails
}

// filePrefix is the start of every file name of namespace ns.
func filePrefix(ns string) string { return "hiercomm-" + ns + "-" }

func segmentPath(ns, name string) string { return shmDir + "/" + filePrefix(ns) + name }

// Segments lists the files this package has in /dev/shm for namespace
// (prefix match), for leak checks in tests.
func Segments(namespace string) ([]string, error) {
	if !supported {
		return nil, fmt.Errorf("shm: not supported on this system")
	}
	names, err := listDir(shmDir)
	if err != nil {
		return nil, fmt.Errorf("shm: listing %s: %w", shmDir, err)
	}
	var out []string
	for _, n := range names {
		if strings.HasPrefix(n, filePrefix(namespace)) {
			out = append(out, shmDir+"/"+n)
		}
	}
	slices.Sort(out)
	return out, nil
}

// tmpSeq makes this process's temporary names unique.
var tmpSeq atomic.Uint64

// createSegment makes the segment file at path for P ranks, with slots of
// slotBytes, steps of stepBytes and eager broadcasts up to eagerBytes,
// replacing a stale one (logged); a live one is an error that names its
// process.
func createSegment(path string, P, slotBytes, stepBytes, eagerBytes int, me procID, log *slog.Logger) (*segment, error) {
	removeStaleTemps(path, log)
	l := newLayout(P, slotBytes, stepBytes, eagerBytes)
	for attempt := 0; ; attempt++ {
		seg, err := createOnce(path, l, me)
		if err == nil || !errors.Is(err, fs.ErrExist) {
			return seg, err
		}
		owner, rank, live := inspect(path)
		if live {
			who := "its creator"
			if rank >= 0 {
				who = "rank " + strconv.Itoa(rank)
			}
			return nil, fmt.Errorf("shm: %s is in use by pid %d (%s): another job with the same namespace? Give each job on a host its own Namespace (remove the file only if that process is not a hiercomm job)",
				path, owner.pid, who)
		}
		if attempt == 3 {
			return nil, fmt.Errorf("shm: %s keeps reappearing while it is being replaced: is another job starting with the same namespace?", path)
		}
		if err := unlinkFile(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("shm: removing the stale segment %s: %w", path, err)
		}
		log.Warn("shm: removed a stale segment left by a job that is gone", "file", path, "pid", owner.pid)
	}
}

// createOnce makes the file without a name where the system can (so that
// no one, not even Segments, ever sees a half-made segment), else under a
// temporary name, and links it to path once it is initialized.
func createOnce(path string, l layout, me procID) (*segment, error) {
	tmp := ""
	fd, err := createUnnamed(shmDir)
	if err != nil {
		tmp = fmt.Sprintf("%s.tmp-%d-%d", path, me.pid, tmpSeq.Add(1))
		if fd, err = openFile(tmp, oCreate|oExcl); err != nil {
			return nil, fmt.Errorf("shm: creating %s: %w", tmp, err)
		}
		defer unlinkFile(tmp) // the final name is a link; the temporary goes in every case
	}
	defer closeFile(fd)
	if err := sizeFile(fd, int64(l.end)); err != nil {
		return nil, fmt.Errorf("shm: reserving %d MiB in %s for %d ranks: %w (enlarge /dev/shm, e.g. docker --shm-size, or lower Config.SlotBytes)",
			l.end>>20, shmDir, l.P, err)
	}
	id, _, err := fstatID(fd)
	if err != nil {
		return nil, err
	}
	mem, err := mapFile(fd, l.end)
	if err != nil {
		return nil, fmt.Errorf("shm: mapping a new segment for %s: %w", path, err)
	}
	atomic.StoreUint32(u32At(mem, hVersion), segVersion)
	atomic.StoreUint32(u32At(mem, hSize), uint32(l.P))
	atomic.StoreUint64(u64At(mem, hSlotBytes), uint64(l.slotBytes))
	atomic.StoreUint64(u64At(mem, hRingBytes), uint64(l.ringBytes))
	atomic.StoreUint64(u64At(mem, hTotal), uint64(l.end))
	atomic.StoreUint64(u64At(mem, hStepBytes), uint64(l.stepBytes))
	atomic.StoreUint64(u64At(mem, hEagerBytes), uint64(l.eagerBytes))
	writeProc(mem, hCreator, me)
	atomic.StoreUint64(u64At(mem, hMagic), segMagic)
	if tmp == "" {
		err = linkUnnamed(fd, path)
	} else {
		err = linkFile(tmp, path)
	}
	if err != nil {
		unmapFile(mem)
		return nil, err
	}
	return &segment{mem: mem, l: l, path: path, id: id, created: true}, nil
}

// inspect judges an existing segment file: live if its creator or any
// process registered in it is alive (owner names one), stale otherwise.
// A file that cannot be read as a segment counts as stale.
func inspect(path string) (owner procID, rank int, live bool) {
	fd, err := openFile(path, 0)
	if err != nil {
		return procID{}, -1, false
	}
	defer closeFile(fd)
	_, size, err := fstatID(fd)
	if err != nil || size < pageBytes {
		return procID{}, -1, false
	}
	mem, err := mapFile(fd, int(size))
	if err != nil {
		return procID{}, -1, false
	}
	defer unmapFile(mem)
	if atomic.LoadUint64(u64At(mem, hMagic)) != segMagic {
		return procID{}, -1, false
	}
	if p := readProc(mem, hCreator); !processGone(p) {
		return p, -1, true
	}
	if atomic.LoadUint32(u32At(mem, hVersion)) != segVersion {
		return procID{}, -1, false
	}
	l := layoutOf(mem)
	if !l.fits(size) {
		return procID{}, -1, false
	}
	for r := range l.P {
		if p := readProc(mem, l.ctl(r)+cProc); p.pid != 0 && !processGone(p) {
			return p, r, true
		}
	}
	return procID{}, -1, false
}

// removeStaleTemps removes temporary files of path whose creating process
// is gone (it died between creating and linking).
func removeStaleTemps(path string, log *slog.Logger) {
	dir, base := shmDir, path[len(shmDir)+1:]
	names, err := listDir(dir)
	if err != nil {
		return
	}
	self := selfIdentity()
	for _, n := range names {
		rest, ok := strings.CutPrefix(n, base+".tmp-")
		if !ok {
			continue
		}
		pidStr, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.ParseUint(pidStr, 10, 32)
		if err != nil || !processGone(procID{pid: pid, ns: self.ns}) {
			continue
		}
		if unlinkFile(dir+"/"+n) == nil {
			log.Warn("shm: removed a temporary segment file left by a process that is gone", "file", dir+"/"+n, "pid", pid)
		}
	}
}

// openSegment maps the segment at path, made by rank 0 for P ranks,
// waiting (polling) until it exists and its creator is alive, or until ctx
// ends.
func openSegment(ctx context.Context, path string, P int) (*segment, error) {
	wait := 50 * time.Microsecond
	for {
		seg, retry, err := openOnce(path, P)
		if !retry {
			return seg, err
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = errors.New("it does not exist")
			}
			return nil, fmt.Errorf("shm: waiting for rank 0 to create %s: %w (last: %v); is rank 0 running, with the same Namespace and Size?",
				path, ctxErr(ctx), err)
		case <-time.After(wait):
		}
		wait = min(2*wait, 20*time.Millisecond)
	}
}

// openOnce tries once; retry says whether waiting may help (no file yet, or
// a stale one that rank 0 is expected to replace).
func openOnce(path string, P int) (seg *segment, retry bool, err error) {
	fd, err := openFile(path, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("shm: opening %s: %w", path, err)
	}
	defer closeFile(fd)
	id, size, err := fstatID(fd)
	if err != nil {
		return nil, false, err
	}
	if size < pageBytes {
		return nil, true, fmt.Errorf("%s is only %d bytes", path, size)
	}
	mem, err := mapFile(fd, int(size))
	if err != nil {
		return nil, false, fmt.Errorf("shm: mapping %s: %w", path, err)
	}
	creator := readProc(mem, hCreator)
	gone := processGone(creator)
	switch {
	case atomic.LoadUint64(u64At(mem, hMagic)) != segMagic || atomic.LoadUint32(u32At(mem, hVersion)) != segVersion:
		unmapFile(mem)
		if gone {
			return nil, true, fmt.Errorf("%s is not a segment of this version, and its creator is gone", path)
		}
		return nil, false, fmt.Errorf("shm: %s was made by another version of hiercomm (pid %d): every rank must run the same build", path, creator.pid)
	case gone:
		unmapFile(mem)
		return nil, true, fmt.Errorf("%s is stale (its creator, pid %d, is gone)", path, creator.pid)
	}
	l := layoutOf(mem)
	if !l.fits(size) {
		unmapFile(mem)
		return nil, false, fmt.Errorf("shm: %s has a header of this version whose geometry (%d ranks, slots of %d bytes, rings of %d, steps of %d) does not fit its %d bytes: it is corrupt; remove it if no job uses it",
			path, l.P, l.slotBytes, l.ringBytes, l.stepBytes, size)
	}
	if l.P != P || int64(l.end) != size {
		unmapFile(mem)
		return nil, false, fmt.Errorf("shm: %s is for %d ranks, but this rank was configured with Size %d: every rank must use the same Size", path, l.P, P)
	}
	return &segment{mem: mem, l: l, path: path, id: id}, false, nil
}

// register claims rank's control block for this process.
func (s *segment) register(rank int, me procID) error {
	off := s.l.ctl(rank) + cProc
	if !atomic.CompareAndSwapUint64(u64At(s.mem, off), 0, me.pid) {
		other := readProc(s.mem, off)
		return fmt.Errorf("shm: rank %d of %s is already attached by pid %d: another job with the same namespace, or two processes given the same rank?",
			rank, s.path, other.pid)
	}
	atomic.StoreUint64(u64At(s.mem, off+8), me.start)
	atomic.StoreUint64(u64At(s.mem, off+16), me.ns)
	w := wordsOf(s.mem, s.l, rank)
	atomic.StoreUint64(w.heartbeat, 1)
	atomic.StoreUint32(w.state, stateAttached)
	return nil
}

// waitAttached waits until every rank has registered, or until ctx ends.
// States only move forward (free → attached → closed or aborted), so once
// no rank is free every rank has registered: a rank that registered, saw
// the others and closed at once (a rank with nothing to do) does not fail
// the ones still looking. A rank that closed while some are still missing
// gave up.
func (s *segment) waitAttached(ctx context.Context) error {
	wait := 20 * time.Microsecond
	for {
		var missing []int
		gone := -1
		for r := range s.l.P {
			switch atomic.LoadUint32(wordsOf(s.mem, s.l, r).state) {
			case stateFree:
				missing = append(missing, r)
			case stateClosed, stateAborted:
				gone = r
			}
		}
		if len(missing) == 0 {
			return nil
		}
		if gone >= 0 {
			return fmt.Errorf("shm: rank %d of %s gave up before every rank attached (ranks %v never did)", gone, s.path, missing)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("shm: ranks %v did not attach to %s: %w", missing, s.path, ctxErr(ctx))
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Millisecond)
	}
}

// unlink removes the file if its name still points at this segment.
func (s *segment) unlink() {
	if id, err := statID(s.path); err == nil && id == s.id {
		unlinkFile(s.path)
	}
}

func (s *segment) unmap() {
	if s.mem != nil {
		unmapFile(s.mem)
		s.mem = nil
	}
}
