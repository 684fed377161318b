package rollout

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
)

// The states of a rollout.
const (
	Running  = "running"
	Promoted = "promoted"
	Aborted  = "aborted"
)

// How a rollout is promoted once baked: by its controller, or only by
// `xdsadmin rollout promote`.
const (
	PromoteAuto   = "auto"
	PromoteManual = "manual"
)

// The kinds of the history records of a rollout's transactions.
const (
	KindRollout = store.KindRollout // began: its overlay written
	KindPromote = store.KindPromote // its resources applied for everyone
	KindAbort   = store.KindAbort   // its overlay removed
)

// overlayPrefix begins a rollout's overlay scope.
const overlayPrefix = resource.ReservedScopePrefix + "rollout."

// Rollout is a canary rollout, as stored (JSON) under the rollouts
// directory.
type Rollout struct {
	// ID is the id of the apply that began it.
	ID string `json:"id"`
	// Scope is the scope its resources are written to when promoted.
	Scope    string `json:"scope"`
	Selector string `json:"selector"`
	// Bake is how long the canary nodes run the change before it may be
	// promoted; MaxRejections how many of them may reject it (NACK)
	// before it is aborted.
	Bake          Duration `json:"bake"`
	MaxRejections int      `json:"maxRejections"`
	Promote       string   `json:"promote"`
	State         string   `json:"state"`
	// Reason says why it ended, or is running still.
	Reason  string    `json:"reason,omitempty"`
	By      string    `json:"by"`
	At      time.Time `json:"at"`
	Message string    `json:"message,omitempty"`
	// Revision is the etcd revision that began it (the record's
	// create_revision; not stored).
	Revision int64 `json:"revision,omitempty"`
	// Resources are what it changes, each with its mod revision in Scope
	// when the rollout began (0: it did not exist).
	Resources []Target   `json:"resources"`
	EndedAt   *time.Time `json:"endedAt,omitempty"`
	// PromotedBy is the id of the apply that promoted it.
	PromotedBy string `json:"promotedBy,omitempty"`

	sel Selector
}

// Target is one resource a rollout changes.
type Target struct {
	Type string `json:"type"`
	Name string `json:"name"`
	Base int64  `json:"base"`
}

// Duration is a time.Duration written as text ("5s") in JSON.
type Duration time.Duration

// MarshalJSON writes d as text.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads d from text.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	*d = Duration(v)
	return err
}

// OverlayScope is the scope of rollout id's overlay.
func OverlayScope(id string) string { return overlayPrefix + id }

// IsOverlay reports whether scope is a rollout's overlay.
func IsOverlay(scope string) bool { return strings.HasPrefix(scope, overlayPrefix) }

// Overlay is r's overlay scope.
func (r *Rollout) Overlay() string { return OverlayScope(r.ID) }

// Matches reports whether r's selector picks the node of id and group.
func (r *Rollout) Matches(id, group string) bool { return r.sel.Matches(id, group) }

// Keys are r's resources in scope (its own, or its overlay).
func (r *Rollout) Keys(scope string) []store.Key {
	out := make([]store.Key, 0, len(r.Resources))
	for _, t := range r.Resources {
		typ, _ := resource.ByName(t.Type) // checked by Parse
		out = append(out, store.Key{Type: typ, Scope: scope, Name: t.Name})
	}
	return out
}

// ErrMalformed is wrapped by the errors of records that do not decode.
var ErrMalformed = errors.New("rollout: malformed record")

// Parse decodes and checks a stored record; created is the record's
// create_revision.
func Parse(b []byte, created int64) (*Rollout, error) {
	var r Rollout
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	r.Revision = created
	if err := r.check(); err != nil {
		return nil, fmt.Errorf("%w: rollout %q: %v", ErrMalformed, r.ID, err)
	}
	return &r, nil
}

// check validates r and parses its selector.
func (r *Rollout) check() error {
	sel, err := ParseSelector(r.Selector)
	if err != nil {
		return err
	}
	r.sel = sel
	switch {
	case r.ID == "" || strings.ContainsAny(r.ID, "/ \t\n"):
		return fmt.Errorf("bad id %q", r.ID)
	case r.State != Running && r.State != Promoted && r.State != Aborted:
		return fmt.Errorf("unknown state %q", r.State)
	case r.Promote != PromoteAuto && r.Promote != PromoteManual:
		return fmt.Errorf("unknown promote mode %q", r.Promote)
	case r.Bake < 0 || r.MaxRejections < 0:
		return errors.New("negative bake or max rejections")
	case len(r.Resources) == 0:
		return errors.New("no resources")
	}
	if err := resource.ValidateScope(r.Scope); err != nil {
		return err
	}
	for _, t := range r.Resources {
		if typ, ok := resource.ByName(t.Type); !ok || typ.Name != t.Type || t.Name == "" {
			return fmt.Errorf("bad resource %s %q", t.Type, t.Name)
		}
	}
	return nil
}
