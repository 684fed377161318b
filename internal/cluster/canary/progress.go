package canary

import (
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/legation-io/legation/internal/cluster/status"
	"github.com/legation-io/legation/internal/state/rollout"
	"github.com/legation-io/legation/internal/state/store"
)

// maxNamed bounds the node ids a Progress lists per state.
const maxNamed = 5

// Progress is where a rollout's canary stands among the connected nodes.
type Progress struct {
	// Canary counts the connected nodes the selector picks that see the
	// rollout's scope; Others the connected nodes it does not pick.
	Canary int `json:"canary"`
	Others int `json:"others"`
	// Of the canary nodes: Acked were sent the change and ACKed it,
	// Pending were sent it and have not answered, Rejecting NACKed it
	// (their latest answer for a type of the rollout is a NACK of a
	// version at or after the rollout began). The rest were sent nothing
	// since it began: it changes nothing they subscribe to.
	Acked     int `json:"acked"`
	Pending   int `json:"pending"`
	Rejecting int `json:"rejecting"`
	// A few of the pending and rejecting nodes, and the rejections'
	// messages (at most one per node listed).
	PendingNodes   []string `json:"pendingNodes,omitempty"`
	RejectingNodes []string `json:"rejectingNodes,omitempty"`
	Messages       []string `json:"messages,omitempty"`
}

// Measure is r's Progress among the nodes of recs (the status records of
// the connected nodes).
func Measure(r *rollout.Rollout, recs []status.NodeStatus) Progress {
	types := map[string]bool{}
	for _, t := range r.Resources {
		types[t.Type] = true
	}
	var p Progress
	for _, ns := range recs {
		if r.Scope != store.DefaultScope && ns.Group != r.Scope {
			continue // it does not see the rollout's scope
		}
		if !r.Matches(ns.NodeID, ns.Group) {
			p.Others++
			continue
		}
		p.Canary++
		switch state, msg := nodeState(ns, types, r.Revision); state {
		case "rejecting":
			p.Rejecting++
			if len(p.RejectingNodes) < maxNamed {
				p.RejectingNodes = append(p.RejectingNodes, ns.NodeID)
				p.Messages = append(p.Messages, msg)
			}
		case "pending":
			p.Pending++
			if len(p.PendingNodes) < maxNamed {
				p.PendingNodes = append(p.PendingNodes, ns.NodeID)
			}
		case "acked":
			p.Acked++
		}
	}
	sort.Strings(p.PendingNodes)
	return p
}

// nodeState is where node ns stands on the types of a rollout that
// began at rev: rejecting (and the message), pending, acked, or ""
// (sent nothing since).
func nodeState(ns status.NodeStatus, types map[string]bool, rev int64) (string, string) {
	state := ""
	for t, ts := range ns.Types {
		if !types[t] {
			continue
		}
		if v := revision(ts.NackVersion); v >= rev {
			return "rejecting", fmt.Sprintf("%s: %s", t, ts.LastNack)
		}
		sent, acked := revision(ts.VersionSent), revision(ts.VersionAcked)
		switch {
		case sent < rev:
		case acked < sent:
			state = "pending"
		case state == "":
			state = "acked"
		}
	}
	return state, ""
}

// revision parses a version as a revision; -1 for none.
func revision(v string) int64 {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// A Verdict is what is to become of a running rollout.
type Verdict struct {
	// Action is "promote", "abort", or "" to let it bake.
	Action string
	// Reason says why, for the rollout's record and the history.
	Reason string
}

// Decide judges running rollout r at now from its Progress: abort once
// more canary nodes reject it than it allows; promote (if its promotion
// is automatic) once its bake time passed and no canary node is still
// pending; else let it bake.
func Decide(r *rollout.Rollout, p Progress, now time.Time) Verdict {
	if p.Rejecting > r.MaxRejections {
		return Verdict{Action: "abort", Reason: fmt.Sprintf("%d canary nodes rejected it (--max-rejections %d): %s",
			p.Rejecting, r.MaxRejections, firstOr(p.Messages, "no message"))}
	}
	baked := now.Sub(r.At) >= time.Duration(r.Bake)
	if r.Promote != rollout.PromoteAuto || !baked || p.Pending > 0 {
		return Verdict{}
	}
	return Verdict{Action: "promote", Reason: fmt.Sprintf("baked %s: %d of %d connected canary nodes ACKed it, %d rejected it",
		time.Duration(r.Bake), p.Acked, p.Canary, p.Rejecting)}
}

func firstOr(s []string, def string) string {
	if len(s) == 0 {
		return def
	}
	return s[0]
}
