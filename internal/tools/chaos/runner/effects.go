package runner

import (
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/tools/chaos/faults"
	"github.com/legation-io/legation/internal/tools/chaos/record"
)

// Effect is what one class of fault did to the clients: while a fault of
// the class was applied, or within Aftermath of its heal.
type Effect struct {
	// Faults is how many were applied; Seconds how long they lasted,
	// summed.
	Faults  int     `json:"faults"`
	Seconds float64 `json:"seconds"`
	// StreamEnds is the client streams that ended in the windows (each
	// is counted once per class whose window holds it).
	StreamEnds int `json:"stream_ends"`
	// Applies is the applies committed in the windows; LagP50, LagP99
	// and LagMax the delivery of those: from an apply's return to each
	// client's first endpoints response at or past its revision (every
	// apply changes endpoints every client subscribes to).
	Applies int           `json:"applies"`
	LagP50  time.Duration `json:"lag_p50"`
	LagP99  time.Duration `json:"lag_p99"`
	LagMax  time.Duration `json:"lag_max"`
}

// Aftermath is how long after its heal a fault's effects are counted: its
// clients reconnect and catch up then.
const Aftermath = 5 * time.Second

// NoFault is the Effects key of the applies committed while no fault's
// window was open: the baseline.
const NoFault = "none"

// window is when a fault's effects are counted.
type window struct {
	kind       string
	start, end time.Time
}

// windows is the windows of the faults applied.
type windows []window

// kinds is the classes whose windows hold t, or NoFault.
func (ws windows) kinds(t time.Time) []string {
	var ks []string
	for _, w := range ws {
		if !t.Before(w.start) && t.Before(w.end) && !slices.Contains(ks, w.kind) {
			ks = append(ks, w.kind)
		}
	}
	if len(ks) == 0 {
		ks = []string{NoFault}
	}
	return ks
}

// seen is a client's endpoints response: when it came, and its version.
type seen struct {
	at time.Time
	v  int64
}

// effects measures each fault class's Effect from the faults applied, the
// applies' commits and the recording.
func effects(log []faults.Applied, commits []commit, events []record.Event, healAt time.Time) map[string]Effect {
	out := map[string]Effect{}
	ws := faultWindows(log, healAt, out)
	for _, e := range events {
		if e.Kind == record.KindEnd && e.Error != "" && !isShutdown(e.Error) {
			for _, k := range ws.kinds(e.Time) {
				x := out[k]
				x.StreamEnds++
				out[k] = x
			}
		}
	}
	for k, ls := range applyLags(commits, endpointVersions(events), ws, out) {
		slices.Sort(ls)
		x := out[k]
		x.LagMax = ls[len(ls)-1]
		x.LagP50 = ls[len(ls)/2]
		x.LagP99 = ls[min(len(ls)-1, len(ls)*99/100)]
		out[k] = x
	}
	return out
}

// faultWindows counts the faults of each class and their time into out,
// and returns their windows: from a fault's application to Aftermath
// after its heal (or after healAt, for a fault the schedule left to the
// final heal).
func faultWindows(log []faults.Applied, healAt time.Time, out map[string]Effect) windows {
	var ws windows
	for _, a := range log {
		healed := a.HealedAt
		if healed.IsZero() {
			healed = healAt
		}
		k := string(a.Kind)
		e := out[k]
		e.Faults++
		e.Seconds += healed.Sub(a.AppliedAt).Seconds()
		out[k] = e
		ws = append(ws, window{k, a.AppliedAt, healed.Add(Aftermath)})
	}
	return ws
}

// endpointVersions is each client's endpoints responses in time order,
// each with the highest version so far: the first response at or past a
// revision is a binary search in it.
func endpointVersions(events []record.Event) map[string][]seen {
	byClient := map[string][]seen{}
	for _, e := range events {
		if e.Kind == record.KindResponse && e.Type == resource.Endpoint.URL {
			if v, err := strconv.ParseInt(e.Version, 10, 64); err == nil {
				byClient[e.Client] = append(byClient[e.Client], seen{e.Time, v})
			}
		}
	}
	for _, s := range byClient {
		sort.SliceStable(s, func(i, j int) bool { return s[i].at.Before(s[j].at) })
		for i := 1; i < len(s); i++ {
			s[i].v = max(s[i].v, s[i-1].v)
		}
	}
	return byClient
}

// applyLags counts the applies of each class into out and returns, by
// class, every client's lag from an apply's return to its first
// endpoints response at or past the apply's revision.
func applyLags(commits []commit, byClient map[string][]seen, ws windows, out map[string]Effect) map[string][]time.Duration {
	lags := map[string][]time.Duration{}
	for _, c := range commits {
		ks := ws.kinds(c.at)
		for _, k := range ks {
			x := out[k]
			x.Applies++
			out[k] = x
		}
		for _, s := range byClient {
			i := sort.Search(len(s), func(i int) bool { return s[i].v >= c.rev })
			if i == len(s) {
				continue // never delivered: the checker's convergence says why
			}
			lag := max(0, s[i].at.Sub(c.at))
			for _, k := range ks {
				lags[k] = append(lags[k], lag)
			}
		}
	}
	return lags
}

// isShutdown reports whether a stream's end is the run's own (its clients
// stopped), not a fault's.
func isShutdown(err string) bool {
	return err == "context canceled" || strings.Contains(err, "code = Canceled")
}
