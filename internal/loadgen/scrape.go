package loadgen

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ServerSample is what a server's /metrics says about its process.
type ServerSample struct {
	At time.Time
	// CPUSeconds is process_cpu_seconds_total.
	CPUSeconds float64
	// RSSBytes is process_resident_memory_bytes.
	RSSBytes float64
}

// Scrape reads process_cpu_seconds_total and
// process_resident_memory_bytes from a Prometheus text /metrics page.
// Both must be there.
func Scrape(ctx context.Context, c *http.Client, url string) (ServerSample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return ServerSample{}, fmt.Errorf("loadgen: metrics URL %q: %w", url, err)
	}
	// Text format: a protobuf or OpenMetrics page would not parse below.
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	resp, err := c.Do(req)
	if err != nil {
		return ServerSample{}, fmt.Errorf("loadgen: GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return ServerSample{}, fmt.Errorf("loadgen: GET %s: %s", url, resp.Status)
	}
	s := ServerSample{At: time.Now()}
	var cpu, rss bool
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, val, ok := strings.Cut(line, " ")
		if !ok || (name != "process_cpu_seconds_total" && name != "process_resident_memory_bytes") {
			continue
		}
		// A timestamp may follow the value.
		val, _, _ = strings.Cut(strings.TrimSpace(val), " ")
		v, err := strconv.ParseFloat(val, 64)
		if err != nil {
			return ServerSample{}, fmt.Errorf("loadgen: %s: %s: %w", url, name, err)
		}
		if name == "process_cpu_seconds_total" {
			s.CPUSeconds, cpu = v, true
		} else {
			s.RSSBytes, rss = v, true
		}
	}
	if err := sc.Err(); err != nil {
		return ServerSample{}, fmt.Errorf("loadgen: GET %s: %w", url, err)
	}
	if !cpu || !rss {
		return ServerSample{}, fmt.Errorf("loadgen: %s has no process_cpu_seconds_total or process_resident_memory_bytes (is it the server's /metrics, with the process collector?)", url)
	}
	return s, nil
}
