package netemu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// What the host must have, and the commands that change it.

// netnsDir is where `ip netns` keeps the namespaces it names.
const netnsDir = "/var/run/netns"

// namePrefix starts every namespace netemu makes: hcnet-<pid>-<k>-...
const namePrefix = "hcnet-"

func nsPath(name string) string { return filepath.Join(netnsDir, name) }

// lookTool finds an iproute2 command in PATH or the sbin directories,
// which are often not in PATH for non-login shells.
func lookTool(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/sbin", "/usr/bin", "/bin"} {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("no %s command in PATH, /usr/sbin or /sbin; install iproute2", name)
}

// run runs argv with stdin and returns an error that holds its output.
func run(ctx context.Context, stdin string, argv ...string) error {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(out.String())
		if msg == "" {
			msg = "no output"
		}
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, msg)
	}
	return nil
}

var avail struct {
	once sync.Once
	err  error
}

// Available reports whether Setup can work here: nil when this process is
// root, the ip and tc commands exist and a network namespace can be made;
// otherwise an error that says which is missing. Tests skip with it. The
// answer is found once per process.
func Available() error {
	avail.once.Do(func() { avail.err = probe() })
	return avail.err
}

func probe() error {
	if euid := os.Geteuid(); euid != 0 {
		return fmt.Errorf("netemu: not root (euid %d): emulated links need network namespaces, veth pairs and tc qdiscs, which need root", euid)
	}
	ip, err := lookTool("ip")
	if err != nil {
		return fmt.Errorf("netemu: %w", err)
	}
	if _, err := lookTool("tc"); err != nil {
		return fmt.Errorf("netemu: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := fmt.Sprintf("%s%d-%d-probe", namePrefix, os.Getpid(), seq.Add(1))
	if err := run(ctx, "", ip, "netns", "add", name); err != nil {
		return fmt.Errorf("netemu: cannot create a network namespace (in a container, it needs CAP_SYS_ADMIN and CAP_NET_ADMIN): %w", err)
	}
	if err := deleteNamespaces(ctx, ip, []string{name}); err != nil {
		return fmt.Errorf("netemu: cannot delete a network namespace: %w", err)
	}
	return nil
}

// Namespaces lists the namespaces of every fabric on this host, of any
// process, by name.
func Namespaces() ([]string, error) {
	ents, err := os.ReadDir(netnsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("netemu: listing namespaces: %w", err)
	}
	var names []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), namePrefix) {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// creator is the pid in a fabric's namespace name, or 0.
func creator(name string) int {
	rest, ok := strings.CutPrefix(name, namePrefix)
	if !ok {
		return 0
	}
	pid, _, _ := strings.Cut(rest, "-")
	n, err := strconv.Atoi(pid)
	if err != nil || n <= 0 {
		return 0
	}
	return n
}

// alive reports whether process pid exists (in this pid namespace).
func alive(pid int) bool {
	return !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// Sweep deletes the namespaces of fabrics whose creating process is dead
// (killed before Close) and returns their names. A fabric made in another
// pid namespace (a container sharing /var/run/netns) whose pid is unused
// here counts as dead.
func Sweep(ctx context.Context) ([]string, error) {
	ip, err := lookTool("ip")
	if err != nil {
		return nil, fmt.Errorf("netemu: %w", err)
	}
	return sweep(ctx, ip)
}

func sweep(ctx context.Context, ip string) ([]string, error) {
	names, err := Namespaces()
	if err != nil {
		return nil, err
	}
	var stale []string
	for _, ns := range names {
		if pid := creator(ns); pid != 0 && pid != os.Getpid() && !alive(pid) {
			stale = append(stale, ns)
		}
	}
	return stale, deleteNamespaces(ctx, ip, stale)
}
