package localcluster

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// socketOwner returns which of pids has the TCP socket whose local
// address is addr (IPv4), from /proc/net/tcp and /proc/PID/fd; 0 if none.
func socketOwner(addr *net.TCPAddr, pids []int) int {
	ip4 := addr.IP.To4()
	if ip4 == nil {
		return 0
	}
	// /proc/net/tcp writes the address as the 32-bit word in host order
	// (little endian here), then the port in big endian hex.
	want := fmt.Sprintf("%08X:%04X", binary.LittleEndian.Uint32(ip4), addr.Port)
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return 0
	}
	defer f.Close()
	// Every line of that local address counts but those of inode 0: a
	// closed connection that used the same port before lingers in
	// TIME_WAIT, owned by no process, and may come first.
	links := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) > 9 && fs[1] == want && fs[9] != "0" {
			links["socket:["+fs[9]+"]"] = true
		}
	}
	if len(links) == 0 {
		return 0
	}
	for _, pid := range pids {
		fds, _ := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "fd", "*"))
		for _, fd := range fds {
			if l, err := os.Readlink(fd); err == nil && links[l] {
				return pid
			}
		}
	}
	return 0
}
