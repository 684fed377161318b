package netnstest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// NS is a network namespace made by New for one test: a veth pair joins it
// to the root namespace, HostIP on the root end and PeerIP on the end
// inside, in a /30 of 10.251.0.0/16 that nothing else on the host uses.
// Inside there is that link and loopback, and no other route: from inside,
// only HostIP (and the namespace's own addresses) can be reached.
//
// Its methods may be called from any goroutine, until the test's cleanup
// removes the namespace; DialContext fails after that.
type NS struct {
	name     string // under /run/netns, as `ip netns list` shows it
	hostLink string // the veth end in the root namespace
	peerLink string // the veth end inside
	prefix   netip.Prefix
	host     netip.Addr
	peer     netip.Addr
	file     *os.File // /run/netns/<name>, open until cleanup: what DialContext joins
}

// The pool the /30s come from: 2^14 of them.
const (
	poolOctet = 251 // 10.251.0.0/16
	poolSlots = 1 << 14
)

// maxAttempts bounds the fresh names and /30s New tries when one it chose
// turns out to be taken (a namespace or link left by a killed process of
// the same pid, another process taking the same /30 at the same time).
const maxAttempts = 8

var (
	// seq numbers the namespaces of this process: with the pid, it makes
	// names unique and chooses where the search for a free /30 begins.
	seq atomic.Uint32

	// setupMu serializes New's setup within the process, so that two
	// tests in parallel never choose the same free /30 before either
	// holds it, nor race in `ip netns add` when /run/netns is first
	// mounted.
	setupMu sync.Mutex
)

// New makes a fresh network namespace for tb, as NS describes, and removes
// it (and the veth pair) in tb.Cleanup. It fails tb (it does not skip) when
// the ip command is missing or the process may not make namespaces: it
// needs root, or CAP_NET_ADMIN and CAP_SYS_ADMIN. Several may exist at once,
// in one test or in tests running in parallel.
func New(tb testing.TB) *NS {
	tb.Helper()
	ip, err := ipPath()
	if err != nil {
		tb.Fatal(err)
	}
	for attempt := 1; ; attempt++ {
		ns, retry, err := create(ip)
		if err == nil {
			tb.Cleanup(func() {
				if err := ns.remove(ip); err != nil {
					tb.Error(err)
				}
			})
			return ns
		}
		if !retry || attempt == maxAttempts {
			tb.Fatal(err)
		}
	}
}

// Name is the namespace's name, as `ip netns list` shows it.
func (ns *NS) Name() string { return ns.name }

// HostIP is the address of the veth end in the root namespace: a server
// that the namespace's clients should reach listens there (HostIP:0).
func (ns *NS) HostIP() netip.Addr { return ns.host }

// PeerIP is the address of the veth end inside the namespace: the address
// a server sees the namespace's connections come from.
func (ns *NS) PeerIP() netip.Addr { return ns.peer }

// Unplug takes the namespace's end of the veth pair down, as if the
// cable to a client's host were pulled or the host had lost power: from
// then on nothing passes between the namespace and the root namespace,
// in either direction, and no side is told. Sockets on both sides stay as
// they were; a server finds its peer gone only by its own means (TCP
// keepalive, TCP_USER_TIMEOUT, its protocol's pings). It fails tb if ip
// fails.
func (ns *NS) Unplug(tb testing.TB) {
	tb.Helper()
	ip, err := ipPath()
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := runIP(ip, "-n", ns.name, "link", "set", ns.peerLink, "down"); err != nil {
		tb.Fatal(err)
	}
}

// DialContext connects to addr from inside the namespace, as
// net.Dialer.DialContext does from the root namespace. network is tcp,
// tcp4, tcp6, udp, udp4 or udp6, and addr's host must be an IP address: a
// name would be resolved, and perhaps dialed, by other goroutines, on
// threads outside the namespace. It blocks until the dial is done; ctx
// cancels it as it does a net.Dialer's.
//
// The connection stays in the namespace (a socket keeps the namespace it
// was made in) and may be used from any goroutine. No goroutine but the
// one that dials ever runs in the namespace: it joins it on a thread of
// its own, locked and never unlocked, and the runtime ends that thread
// when the goroutine returns.
func (ns *NS) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	switch network {
	case "tcp", "tcp4", "tcp6", "udp", "udp4", "udp6":
	default:
		return nil, fmt.Errorf("netnstest: dial %s %s: network not supported", network, addr)
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("netnstest: dial %s %s: %w", network, addr, err)
	}
	if _, err := netip.ParseAddr(host); err != nil {
		return nil, fmt.Errorf("netnstest: dial %s %s: host is not an IP address", network, addr)
	}
	ch := make(chan dialResult, 1)
	go ns.dialInside(ctx, network, addr, ch)
	r := <-ch
	return r.conn, r.err
}

type dialResult struct {
	conn net.Conn
	err  error
}

// dialInside dials from inside the namespace and sends the result on ch.
// It must be run as a goroutine of its own: it locks the thread it runs on
// and leaves it in the namespace, so the runtime ends that thread when it
// returns.
func (ns *NS) dialInside(ctx context.Context, network, addr string, ch chan<- dialResult) {
	runtime.LockOSThread()
	if unix.Gettid() == unix.Getpid() {
		// The main thread cannot end: the runtime parks it for good
		// when its goroutine returns locked, so it must never join the
		// namespace (it would hold the namespace, and its veth, for
		// the life of the process). Hand the dial to a new goroutine:
		// while this one waits locked to the main thread, the new one
		// runs on another thread. Unlocking is safe here, this thread
		// never left the root namespace.
		inner := make(chan dialResult, 1)
		go ns.dialInside(ctx, network, addr, inner)
		r := <-inner
		runtime.UnlockOSThread()
		ch <- r
		return
	}
	// Deliberately no runtime.UnlockOSThread from here on.
	rc, err := ns.file.SyscallConn()
	if err != nil {
		ch <- dialResult{err: fmt.Errorf("netnstest: namespace %s: %w", ns.name, err)}
		return
	}
	var setnsErr error
	// Control keeps the file open while the fd is used; it fails once
	// cleanup has closed it.
	if err := rc.Control(func(fd uintptr) { setnsErr = unix.Setns(int(fd), unix.CLONE_NEWNET) }); err != nil {
		ch <- dialResult{err: fmt.Errorf("netnstest: namespace %s: %w", ns.name, err)}
		return
	}
	if setnsErr != nil {
		ch <- dialResult{err: fmt.Errorf("netnstest: setns %s: %w", ns.name, setnsErr)}
		return
	}
	// The socket is made on this thread, so in the namespace.
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		err = fmt.Errorf("netnstest: dial from %s: %w", ns.name, err)
	}
	ch <- dialResult{conn: c, err: err}
}

// HTTPClient returns a new HTTP client whose connections are dialed from
// inside the namespace (DialContext), one per request (no keep-alives), with
// no proxy whatever the environment says. URLs must have an IP address as
// host. For https, set TLSClientConfig on its Transport, an
// *http.Transport.
func (ns *NS) HTTPClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext:       ns.DialContext,
		DisableKeepAlives: true,
	}}
}

// GRPCDialer returns a dialer for grpc.WithContextDialer that connects over
// TCP from inside the namespace (DialContext). The target's address must be
// an IP address and port, e.g. "passthrough:///" + HostIP:port.
func (ns *NS) GRPCDialer() func(context.Context, string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		return ns.DialContext(ctx, "tcp", addr)
	}
}

// create makes one namespace, or undoes what it made and says whether
// another attempt, with fresh names and another /30, may succeed.
func create(ip string) (ns *NS, retry bool, err error) {
	setupMu.Lock()
	defer setupMu.Unlock()

	pid := os.Getpid()
	n := seq.Add(1)
	ns = &NS{
		name: fmt.Sprintf("legation-%d-%d", pid, n),
		// Link names have at most 15 bytes: lg, pid and n in hex.
		hostLink: fmt.Sprintf("lg%xh%x", pid, n),
		peerLink: fmt.Sprintf("lg%xp%x", pid, n),
	}
	if out, err := runIP(ip, "netns", "add", ns.name); err != nil {
		return nil, exists(out), err
	}
	defer func() {
		if err != nil {
			if rerr := ns.remove(ip); rerr != nil {
				err = errors.Join(err, rerr)
			}
			ns = nil
		}
	}()
	if ns.file, err = os.Open("/run/netns/" + ns.name); err != nil {
		return ns, false, fmt.Errorf("netnstest: %w", err)
	}
	// The search for a free /30 starts at a slot that the pid spreads
	// across the pool (Knuth's multiplicative hash, its top 14 bits), so
	// that processes start far apart, plus n, so that a process's
	// namespaces follow each other.
	start := uint32(pid)*2654435761>>18 + n
	if ns.prefix, err = freePrefix(ip, start); err != nil {
		return ns, false, err
	}
	retry, err = ns.link(ip)
	return ns, retry, err
}

// link connects the namespace to the host: a veth pair with the two
// addresses of ns.prefix, both ends up, and the namespace's loopback up.
// It then checks that no other process took the /30 meanwhile; retry
// says whether another attempt may succeed.
func (ns *NS) link(ip string) (retry bool, err error) {
	ns.host = ns.prefix.Addr().Next()
	ns.peer = ns.host.Next()
	hostCIDR := netip.PrefixFrom(ns.host, 30).String()
	peerCIDR := netip.PrefixFrom(ns.peer, 30).String()
	if out, err := runIP(ip, "link", "add", ns.hostLink, "type", "veth", "peer", "name", ns.peerLink, "netns", ns.name); err != nil {
		return exists(out), err
	}
	for _, args := range [][]string{
		{"addr", "add", hostCIDR, "dev", ns.hostLink},
		{"link", "set", ns.hostLink, "up"},
		{"-n", ns.name, "addr", "add", peerCIDR, "dev", ns.peerLink},
		{"-n", ns.name, "link", "set", ns.peerLink, "up"},
		{"-n", ns.name, "link", "set", "lo", "up"},
	} {
		if _, err := runIP(ip, args...); err != nil {
			return false, err
		}
	}
	// freePrefix saw the /30 free, but another process may have taken
	// it since: look again now that ours is there.
	use, err := prefixUse(ip, ns.prefix, ns.hostLink)
	if err != nil {
		return false, err
	}
	if use != "" {
		return true, fmt.Errorf("netnstest: %s was taken while %s was set up: %s", ns.prefix, ns.name, use)
	}
	return false, nil
}

// remove deletes the veth pair and the namespace. The link is deleted
// explicitly rather than left to go with the namespace: a socket still open
// in the namespace would keep it, and the link with its address, alive.
func (ns *NS) remove(ip string) error {
	var errs []error
	if ns.file != nil {
		if err := ns.file.Close(); err != nil {
			errs = append(errs, fmt.Errorf("netnstest: %w", err))
		}
	}
	if out, err := runIP(ip, "link", "del", ns.hostLink); err != nil && !noDevice(out) {
		errs = append(errs, err)
	}
	if _, err := runIP(ip, "netns", "del", ns.name); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// slotPrefix is the i-th /30 of the pool, i modulo poolSlots.
func slotPrefix(i uint32) netip.Prefix {
	i %= poolSlots
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, poolOctet, byte(i >> 6), byte(i << 2)}), 30)
}

// freePrefix returns the first /30 of the pool, from slot start on, that
// nothing on the host uses.
func freePrefix(ip string, start uint32) (netip.Prefix, error) {
	for k := uint32(0); k < poolSlots; k++ {
		p := slotPrefix(start + k)
		use, err := prefixUse(ip, p, "")
		if err != nil {
			return netip.Prefix{}, err
		}
		if use == "" {
			return p, nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("netnstest: no free /30 in 10.%d.0.0/16", poolOctet)
}

// routeTypes are the words `ip route` may print before a route's
// destination.
var routeTypes = map[string]bool{
	"unicast": true, "local": true, "broadcast": true, "multicast": true,
	"anycast": true, "unreachable": true, "blackhole": true, "prohibit": true,
	"throw": true, "nat": true,
}

// prefixUse says what on the host (in the root namespace) overlaps p: an
// address on an interface or a route, other than those of link own.
// It returns "" when nothing does.
func prefixUse(ip string, p netip.Prefix, own string) (string, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return "", fmt.Errorf("netnstest: interfaces: %w", err)
	}
	for _, ifc := range ifs {
		if ifc.Name == own {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			return "", fmt.Errorf("netnstest: addresses of %s: %w", ifc.Name, err)
		}
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			addr, ok := netip.AddrFromSlice(ipn.IP)
			if !ok {
				continue
			}
			ones, _ := ipn.Mask.Size()
			if q := netip.PrefixFrom(addr.Unmap(), ones); q.Overlaps(p) {
				return fmt.Sprintf("address %s on %s", q, ifc.Name), nil
			}
		}
	}
	out, err := runIP(ip, "-4", "route", "show", "table", "all")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && routeTypes[f[0]] {
			f = f[1:]
		}
		if len(f) == 0 || f[0] == "default" {
			continue
		}
		if own != "" && strings.Contains(" "+line+" ", " dev "+own+" ") {
			continue
		}
		dst, err := netip.ParsePrefix(f[0])
		if err != nil {
			a, err := netip.ParseAddr(f[0])
			if err != nil {
				continue
			}
			dst = netip.PrefixFrom(a, a.BitLen())
		}
		if dst.Overlaps(p) {
			return "route " + strings.TrimSpace(line), nil
		}
	}
	return "", nil
}

// ipPath finds the ip command: in PATH, or in /usr/sbin or /sbin, which a
// user's PATH may lack.
var ipPath = sync.OnceValues(func() (string, error) {
	if p, err := exec.LookPath("ip"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/ip", "/sbin/ip"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("netnstest: the ip command is missing: `make setup` installs Debian's iproute2")
})

// runIP runs ip with args and returns what it printed; its error names the
// command and holds that output.
func runIP(ip string, args ...string) ([]byte, error) {
	out, err := exec.Command(ip, args...).CombinedOutput()
	if err != nil {
		msg := string(bytes.TrimSpace(out))
		if strings.Contains(msg, "Operation not permitted") || strings.Contains(msg, "Permission denied") {
			msg += " (netnstest needs root, or CAP_NET_ADMIN and CAP_SYS_ADMIN)"
		}
		return out, fmt.Errorf("netnstest: %s %s: %w: %s", ip, strings.Join(args, " "), err, msg)
	}
	return out, nil
}

// exists says whether ip failed because a name was taken.
func exists(out []byte) bool { return bytes.Contains(out, []byte("File exists")) }

// noDevice says whether ip failed because the link is already gone.
func noDevice(out []byte) bool { return bytes.Contains(out, []byte("Cannot find device")) }
