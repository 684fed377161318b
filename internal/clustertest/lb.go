package clustertest

import (
	"encoding/csv"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"time"
)

// LBServers asks HAProxy, on its admin socket, for the state of each
// replica in each backend: keys are "xds/replica-I" and "http/replica-I",
// values HAProxy's status ("UP", "DOWN", "UP 1/2" while going down,
// "MAINT", ...).
func (c *Cluster) LBServers() (map[string]string, error) {
	conn, err := net.DialTimeout("unix", c.LBStatsSocket, 2*time.Second)
	if err != nil {
		return nil, fmt.Errorf("HAProxy admin socket: %w", err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck // a unix socket supports deadlines
	if _, err := io.WriteString(conn, "show stat\n"); err != nil {
		return nil, fmt.Errorf("HAProxy admin socket: %w", err)
	}
	b, err := io.ReadAll(conn)
	if err != nil {
		return nil, fmt.Errorf("HAProxy admin socket: show stat: %w", err)
	}
	return parseStat(string(b))
}

// parseStat reads the CSV of HAProxy's "show stat": a header line
// "# pxname,svname,...", then one line per frontend, server and backend.
func parseStat(s string) (map[string]string, error) {
	r := csv.NewReader(strings.NewReader(strings.TrimPrefix(s, "# ")))
	r.FieldsPerRecord = -1
	rows, err := r.ReadAll()
	if err != nil || len(rows) == 0 {
		return nil, fmt.Errorf("HAProxy show stat: %v in %q", err, s)
	}
	px, sv, st := slices.Index(rows[0], "pxname"), slices.Index(rows[0], "svname"), slices.Index(rows[0], "status")
	if px < 0 || sv < 0 || st < 0 {
		return nil, fmt.Errorf("HAProxy show stat: no pxname, svname or status column in %q", rows[0])
	}
	states := map[string]string{}
	for _, row := range rows[1:] {
		if len(row) <= max(px, sv, st) || row[sv] == "FRONTEND" || row[sv] == "BACKEND" {
			continue
		}
		states[row[px]+"/"+row[sv]] = row[st]
	}
	return states, nil
}
