package chaos

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/tools/chaos/record"
)

// Violation kinds, one per promise checked.
const (
	// VersionBackwards: a response's version is lower than one the client
	// received before on the stream, or on an earlier stream when it
	// presented its version on reconnecting.
	VersionBackwards = "backwards"
	// HalfApply: a response does not hold the state at its version of
	// the resources it carries (a SotW full-state response's set differs,
	// a resource is absent or at another mod revision at that revision).
	HalfApply = "half-apply"
	// Resurrected: a response carries a resource that was deleted at or
	// before its version and not created again since.
	Resurrected = "resurrected"
	// Duplicate: a stream received the same (type, version) twice, or
	// (delta) a resource at the version the stream already holds.
	Duplicate = "duplicate"
	// Resent: a delta stream received a resource at the version its
	// client presented in initial_resource_versions.
	Resent = "resent"
	// NotConverged: after the heal, a client's last state of a type is
	// not etcd's final one.
	NotConverged = "not-converged"
	// Malformed: a response's version is not a revision.
	Malformed = "malformed"
)

// Options tunes Check.
type Options struct {
	// Group returns a client's group (its scope besides "default") from
	// its node id. Nil: every client sees the default scope only.
	Group func(client string) string
	// Overlays returns the overlay scopes ("~rollout.<id>") of the canary
	// rollouts over the default scope that pick a client, from its node
	// id: while a rollout runs, its overlay's resources are what the
	// client must hold, and a client no rollout picks must never hold
	// them (its content then differs from the state: HalfApply). Nil:
	// no rollout.
	Overlays func(client string) []string
	// SotWNewNames allows a SotW response of a named type (EDS, RDS) at a
	// version the stream already received when it carries a name the
	// stream had not received at that version, or no resource at all: the
	// server answers newly asked names at once, even at the same version,
	// a name that does not exist with a resource error only (recordings
	// do not keep the errors; such a response resends nothing).
	SotWNewNames bool
	// InterimCDS allows a SotW CDS response to repeat the stream's last
	// CDS version (or, as the stream's first, the version the client
	// presented) when it carries a cluster deleted after that version:
	// make before break keeps the clusters a change removes in an interim
	// response, built from a later revision and sent with the previous
	// version (changes while the hold lasts send further ones). Its set
	// must hold that version's clusters, and its extra ones must exist
	// later in the history; its bytes are not compared.
	InterimCDS bool
	// Heal, when not zero, is when the faults ended: every client's final
	// state of each type it received must be etcd's final state
	// (NotConverged), and Report.Converge is the longest time from Heal
	// to a client's last response.
	Heal time.Time
	// ConvergeWithin, when positive, bounds Report.Converge: a client
	// whose last response came later after Heal is NotConverged.
	ConvergeWithin time.Duration
}

// DocumentedExceptions are the Options of the resends docs/concepts/serving-xds.md
// documents as intended.
func DocumentedExceptions() Options {
	return Options{SotWNewNames: true, InterimCDS: true}
}

// Violation is one broken promise.
type Violation struct {
	Kind   string
	Client string
	Stream int64
	Type   string
	// Lines are the recording lines of the responses involved, Versions
	// their versions, in the same order.
	Lines    []int
	Versions []string
	// Revisions are the etcd revisions involved (a deletion, the final
	// revision).
	Revisions []int64
	Detail    string
}

func (v Violation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: client %s stream %d type %s:", v.Kind, v.Client, v.Stream, shortType(v.Type))
	for i, l := range v.Lines {
		fmt.Fprintf(&b, " line %d (version %s)", l, v.Versions[i])
	}
	if len(v.Revisions) > 0 {
		fmt.Fprintf(&b, " revisions %v", v.Revisions)
	}
	b.WriteString(": ")
	b.WriteString(v.Detail)
	return b.String()
}

func shortType(url string) string {
	if t, ok := resource.ByURL(url); ok {
		return t.Name
	}
	return url
}

// Report is the outcome of CheckRun.
type Report struct {
	// Responses is the number of responses checked; Unknown those of them
	// at a revision outside the history (their content is not checked).
	Responses, Unknown int
	Violations         []Violation
	// Converge is the longest time from Options.Heal to a client's last
	// response of a type (0 when every client's last came before).
	Converge time.Duration
}

// Check returns the violations of the recorded responses against h.
func Check(h *History, events []record.Event, opts Options) []Violation {
	return CheckRun(h, events, opts).Violations
}

// held is a resource a client holds: received at ver (SotW: the
// response's version, so it holds the state at ver; delta: the
// resource's mod revision).
type held struct {
	ver  int64
	sotw bool
}

type respRef struct {
	line    int
	version string
	v       int64
}

type clientState struct {
	chain  chain                      // the scopes it sees (Options.Group, Options.Overlays)
	max    map[string]respRef         // per type: the highest version received
	held   map[string]map[string]held // per type: what the client holds
	full   map[string]bool            // per type: held is the full set
	last   map[string]record.Event    // per type: the last response
	stream map[int64]*streamState     // open streams
}

type streamState struct {
	mode      string
	line      int // of its start
	presented map[string]map[string]string
	last      map[string]respRef                   // per type: the last response
	versions  map[string]map[int64]int             // per type: responses at each version
	names     map[string]map[int64]map[string]bool // per type and version: SotW names sent
	held      map[string]map[string]string         // per type: delta name to version held
	carried   map[string]map[string]bool           // per type: names received
	seen      map[string]bool                      // per type: a response was received
}

// newest is the highest revision among versions (0 for none).
func newest(versions map[string]string) int64 {
	var n int64
	for _, v := range versions {
		if r, err := strconv.ParseInt(v, 10, 64); err == nil && r > n {
			n = r
		}
	}
	return n
}

func newStream(e *record.Event) *streamState {
	return &streamState{mode: e.Mode, line: e.Line, presented: e.Presented, last: map[string]respRef{},
		versions: map[string]map[int64]int{}, names: map[string]map[int64]map[string]bool{},
		held: map[string]map[string]string{}, carried: map[string]map[string]bool{}, seen: map[string]bool{},
	}
}

// CheckRun checks the recorded responses against h and reports.
func CheckRun(h *History, events []record.Event, opts Options) Report {
	c := &checker{h: h, opts: opts, clients: map[string]*clientState{}}
	for i := range events {
		c.event(&events[i])
	}
	if !opts.Heal.IsZero() {
		c.converged()
	}
	return c.rep
}

type checker struct {
	h       *History
	opts    Options
	clients map[string]*clientState
	rep     Report
}

func (c *checker) client(id string) *clientState {
	cs := c.clients[id]
	if cs == nil {
		cs = &clientState{max: map[string]respRef{}, held: map[string]map[string]held{}, full: map[string]bool{},
			last: map[string]record.Event{}, stream: map[int64]*streamState{}}
		var group string
		var overlays []string
		if c.opts.Group != nil {
			group = c.opts.Group(id)
		}
		if c.opts.Overlays != nil {
			overlays = c.opts.Overlays(id)
		}
		cs.chain = chainOf(group, overlays)
		c.clients[id] = cs
	}
	return cs
}

func (c *checker) add(e *record.Event, kind string, lines []int, versions []string, revs []int64, format string, a ...any) {
	c.rep.Violations = append(c.rep.Violations, Violation{Kind: kind, Client: e.Client, Stream: e.Stream, Type: e.Type,
		Lines: lines, Versions: versions, Revisions: revs, Detail: fmt.Sprintf(format, a...)})
}

// response is a response being checked: its event, its client's and its
// stream's state, and what the checks derive from it.
type response struct {
	e  *record.Event
	cs *clientState
	st *streamState
	v  int64   // the version, a revision
	me respRef // the response, as the next ones compare with it
	t  *resource.Type
	// known: the type is a Legation type (t is set).
	known bool
	// fullSotW: a SotW response of a wildcard type, the full set.
	fullSotW bool
	// interim: a SotW CDS response the InterimCDS exception allows.
	interim bool
}

// event checks one recorded event and keeps what later ones are checked
// against.
func (c *checker) event(e *record.Event) {
	cs := c.client(e.Client)
	switch e.Kind {
	case record.KindStart:
		cs.stream[e.Stream] = newStream(e)
		return
	case record.KindEnd:
		delete(cs.stream, e.Stream)
		return
	}
	st := cs.stream[e.Stream]
	if st == nil { // a recording cut at its start: the stream is new to us
		st = newStream(e)
		cs.stream[e.Stream] = st
	}
	c.rep.Responses++
	v, err := strconv.ParseInt(e.Version, 10, 64)
	if err != nil || v < 0 {
		c.add(e, Malformed, []int{e.Line}, []string{e.Version}, nil, "the version is not a revision")
		return
	}
	t, known := resource.ByURL(e.Type)
	r := &response{e: e, cs: cs, st: st, v: v, me: respRef{line: e.Line, version: e.Version, v: v}, t: t, known: known,
		fullSotW: e.Mode == record.ModeSotW && known && t.Wildcard}

	c.backwards(r)

	// (d) the same (type, version) twice on the stream.
	st.start(e.Type)
	n := st.versions[e.Type][v]
	r.interim = c.interim(r)
	if e.Mode == record.ModeSotW && n > 0 {
		c.sotwDuplicate(r, n)
	}
	if e.Mode == record.ModeDelta {
		c.deltaDuplicates(r, n)
	}

	// (b), (c) the state at the version.
	if !known {
		// not a Legation type: nothing to compare with
	} else if !c.h.Known(v) {
		c.rep.Unknown++
	} else {
		c.content(r)
	}

	r.keepOnStream()
	r.keepForClient()
}

// backwards checks (a), never backwards: on the stream, and across
// streams when the client presented what it holds.
func (c *checker) backwards(r *response) {
	e, st, v := r.e, r.st, r.v
	if prev, ok := st.last[e.Type]; ok && v < prev.v {
		c.add(e, VersionBackwards, []int{prev.line, e.Line}, []string{prev.version, e.Version}, nil, "the version went down on the stream")
	} else if !ok && len(st.presented[e.Type]) > 0 {
		if e.Mode == record.ModeDelta {
			// A delta client presents its resources' versions, not the
			// system_version_info it last saw: the promise is not to go
			// below the newest of them (another replica may be a few
			// revisions behind the last one, and catches up that far).
			if pv := newest(st.presented[e.Type]); v < pv {
				c.add(e, VersionBackwards, []int{st.line, e.Line}, []string{strconv.FormatInt(pv, 10), e.Version}, nil,
					"the version went below the newest resource version the client presented in initial_resource_versions")
			}
		} else if prev, ok := r.cs.max[e.Type]; ok && v < prev.v {
			c.add(e, VersionBackwards, []int{prev.line, e.Line}, []string{prev.version, e.Version}, nil,
				"the version went down across a reconnect at which the client presented its versions")
		}
	}
}

// start makes the stream's maps of type typ, at its first response of
// the type.
func (st *streamState) start(typ string) {
	if st.versions[typ] == nil {
		st.versions[typ] = map[int64]int{}
		st.names[typ] = map[int64]map[string]bool{}
		st.held[typ] = map[string]string{}
		st.carried[typ] = map[string]bool{}
	}
}

// interim reports whether r is a SotW CDS response the InterimCDS
// exception allows: at the stream's last CDS version (or, first on the
// stream, the version the client presented), carrying a cluster deleted
// later.
func (c *checker) interim(r *response) bool {
	e, st := r.e, r.st
	if !c.opts.InterimCDS || e.Mode != record.ModeSotW || !r.known || r.t != resource.Cluster {
		return false
	}
	prev, ok := st.last[e.Type]
	return ((ok && prev.v == r.v) || (!ok && st.presented[e.Type][""] == e.Version)) &&
		c.removesLater(e, r.cs.chain, r.v)
}

// sotwDuplicate checks (d) for a SotW response at a version the stream
// received n times already: a duplicate unless an exception allows it.
func (c *checker) sotwDuplicate(r *response, n int) {
	e := r.e
	prev := r.st.last[e.Type]
	switch {
	case r.interim:
	case c.opts.SotWNewNames && r.known && !r.t.Wildcard &&
		(len(e.Resources) == 0 || hasNew(e.Resources, r.st.names[e.Type][r.v])):
	default:
		c.add(e, Duplicate, []int{prev.line, e.Line}, []string{prev.version, e.Version}, nil,
			"the stream received this type at this version %d times", n+1)
	}
}

// deltaDuplicates checks (d) and (e) for a delta response, the stream
// having received n at its version already: no resource sent again at
// the version the stream holds, no empty response at a version already
// sent, and nothing the client presented resent.
func (c *checker) deltaDuplicates(r *response, n int) {
	e, st := r.e, r.st
	var dup []string
	for _, res := range e.Resources {
		if hv, ok := st.held[e.Type][res.Name]; ok && hv == res.Version {
			dup = append(dup, res.Name+"@"+res.Version)
		}
	}
	prev := st.last[e.Type]
	if len(dup) > 0 {
		c.add(e, Duplicate, []int{prev.line, e.Line}, []string{prev.version, e.Version}, nil,
			"resources sent again at the version the stream holds: %s", strings.Join(dup, ", "))
	} else if n > 0 && len(e.Resources) == 0 && len(e.Removed) == 0 {
		c.add(e, Duplicate, []int{prev.line, e.Line}, []string{prev.version, e.Version}, nil, "an empty response at a version already sent")
	}
	// (e) what the client presented is not resent.
	var resent []string
	for _, res := range e.Resources {
		if pv, ok := st.presented[e.Type][res.Name]; ok && pv == res.Version && !st.carried[e.Type][res.Name] {
			resent = append(resent, res.Name+"@"+res.Version)
		}
	}
	if len(resent) > 0 {
		c.add(e, Resent, []int{e.Line}, []string{e.Version}, nil,
			"resources sent at the version the client presented in initial_resource_versions: %s", strings.Join(resent, ", "))
	}
}

// keepOnStream records r in its stream's state: the versions and names
// received, what a delta stream holds, and the highest version the
// client received.
func (r *response) keepOnStream() {
	e, st, v := r.e, r.st, r.v
	st.versions[e.Type][v]++
	if st.names[e.Type][v] == nil {
		st.names[e.Type][v] = map[string]bool{}
	}
	for _, res := range e.Resources {
		st.names[e.Type][v][res.Name] = true
		st.held[e.Type][res.Name] = res.Version
		st.carried[e.Type][res.Name] = true
	}
	for _, name := range e.Removed {
		delete(st.held[e.Type], name)
	}
	if prev, ok := r.cs.max[e.Type]; !ok || v > prev.v {
		r.cs.max[e.Type] = r.me
	}
}

// keepForClient records what the client holds after r, for convergence,
// and r as the last response of its type on the client and the stream.
func (r *response) keepForClient() {
	e, cs, st := r.e, r.cs, r.st
	// A stream that presented nothing for the type starts over with its
	// first response.
	if (!st.seen[e.Type] && len(st.presented[e.Type]) == 0) || cs.held[e.Type] == nil || r.fullSotW {
		cs.held[e.Type] = map[string]held{}
	}
	cs.full[e.Type] = r.known && r.t.Wildcard
	for _, res := range e.Resources {
		hv := held{ver: r.v, sotw: true}
		if e.Mode == record.ModeDelta {
			rv, _ := strconv.ParseInt(res.Version, 10, 64)
			hv = held{ver: rv}
		}
		cs.held[e.Type][res.Name] = hv
	}
	for _, name := range e.Removed {
		delete(cs.held[e.Type], name)
	}
	cs.last[e.Type] = *e
	st.seen[e.Type] = true
	st.last[e.Type] = r.me
}

// removesLater reports whether a response carries a resource that a
// node of chain ch stops seeing after revision v: an interim CDS response
// holds removed clusters back, so it carries one.
func (c *checker) removesLater(e *record.Event, ch chain, v int64) bool {
	for _, r := range e.Resources {
		for _, scope := range ch {
			for _, hv := range c.h.keys[rkey{e.Type, scope, r.Name}] {
				if hv.rev > v && hv.deleted {
					return true
				}
			}
		}
	}
	return false
}

// hasNew reports whether rs carries a name not in sent.
func hasNew(rs []record.Resource, sent map[string]bool) bool {
	for _, r := range rs {
		if !sent[r.Name] {
			return true
		}
	}
	return false
}

// converged checks every client's final state of each type against
// etcd's final state.
func (c *checker) converged() {
	final := c.h.Last
	for _, id := range slices.Sorted(maps.Keys(c.clients)) {
		cs := c.clients[id]
		for _, typ := range slices.Sorted(maps.Keys(cs.held)) {
			last := cs.last[typ]
			if d := last.Time.Sub(c.opts.Heal); d > c.rep.Converge {
				c.rep.Converge = d
			}
			if _, known := resource.ByURL(typ); !known {
				continue
			}
			var wrong []string
			hs := cs.held[typ]
			for _, name := range slices.Sorted(maps.Keys(hs)) {
				hv := hs[name]
				hv0, _ := c.h.visible(typ, cs.chain, name, final)
				mod := hv0.mod
				switch {
				case hv.sotw && mod == 0 && !cs.full[typ]:
					// A deleted named resource is not pushed on SotW.
				case hv.sotw && mod != 0 && mod <= hv.ver:
				case !hv.sotw && mod == hv.ver:
				default:
					wrong = append(wrong, fmt.Sprintf("%s held at %d, final %d", name, hv.ver, mod))
				}
			}
			if cs.full[typ] {
				for _, name := range slices.Sorted(maps.Keys(c.h.set(typ, cs.chain, final))) {
					if _, ok := hs[name]; !ok {
						wrong = append(wrong, name+" missing")
					}
				}
			}
			e := last
			if len(wrong) > 0 {
				c.add(&e, NotConverged, []int{last.Line}, []string{last.Version}, []int64{final},
					"the last state differs from etcd's final state: %s", strings.Join(wrong, "; "))
			} else if w := c.opts.ConvergeWithin; w > 0 && last.Time.Sub(c.opts.Heal) > w {
				c.add(&e, NotConverged, []int{last.Line}, []string{last.Version}, []int64{final},
					"converged %s after the heal, more than %s", last.Time.Sub(c.opts.Heal), w)
			}
		}
	}
}
