package tlsfiles

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"
)

// Files is TLS material loaded from files and kept current by Run. Its
// methods may be called concurrently, and the configs it returns used
// concurrently, while Run reloads.
type Files struct {
	cfg    Config
	logger *slog.Logger

	// The current material, swapped whole by Run and read at each
	// handshake. pair is nil when no certificate is configured, ca when
	// no CA file is; neither goes from set to nil.
	pair atomic.Pointer[pair]
	ca   atomic.Pointer[caSet]

	running atomic.Bool // Run has been called
}

// New loads the files cfg names and checks them now, so that a bad flag
// fails at startup (this is the I/O a constructor otherwise would not
// do). Its error lists every problem found, each naming the file (and its
// flag, see Config.Flag) and what is wrong with it.
func New(cfg Config) (*Files, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	f := &Files{cfg: cfg, logger: cfg.Logger}
	if f.logger == nil {
		f.logger = slog.New(slog.DiscardHandler)
	}
	var errs []error
	if cfg.CertFile != "" {
		p, err := cfg.loadPair(time.Now())
		if err != nil {
			errs = append(errs, err)
		} else {
			f.pair.Store(p)
		}
	}
	if cfg.CAFile != "" {
		ca, err := cfg.loadCA()
		if err != nil {
			errs = append(errs, err)
		} else {
			f.ca.Store(ca)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return f, nil
}

// HasCert reports whether a certificate and key are configured.
func (f *Files) HasCert() bool { return f.cfg.CertFile != "" }

// HasCA reports whether a CA file is configured.
func (f *Files) HasCA() bool { return f.cfg.CAFile != "" }

// Certificate is the current leaf certificate, nil if none is configured.
func (f *Files) Certificate() *x509.Certificate {
	if p := f.pair.Load(); p != nil {
		return p.cert.Leaf
	}
	return nil
}

// Run reads the files every Config.Interval until ctx ends, then returns
// nil. When a file's content changed it loads and checks it as New does;
// good material is swapped in for the handshakes that follow (connections
// already open are not touched) and logged at Info with the leaf's
// identity and expiry. Bad material is kept away: the last good material
// stays in use, and a Warn names the file and the problem once per bad
// content.
//
// That Warn waits until the same bad content is seen on two polls in a
// row: a rotation that writes the certificate and then the key, or a
// file in the middle of being written, is bad for an instant and then
// good, and should not alarm anyone. The certificate and key are only
// ever swapped together, when they match.
//
// Run must be called at most once; a second call returns an error.
func (f *Files) Run(ctx context.Context) error {
	if !f.running.CompareAndSwap(false, true) {
		return errors.New("tlsfiles: Run called twice")
	}
	t := time.NewTicker(f.cfg.interval())
	defer t.Stop()
	var w watch
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		now := time.Now()
		if f.HasCert() {
			f.pollPair(&w, now)
		}
		if f.HasCA() {
			f.pollCA(&w)
		}
	}
}

// watch is what Run remembers between polls.
type watch struct {
	pair, ca bad
	// expired is the pair whose expiry Run has warned about.
	expired *pair
}

// bad tracks the bad content a file (or pair of files) holds.
type bad struct {
	set    bool
	sum    [sha256.Size]byte // of the bad content
	polls  int               // consecutive polls that saw it
	warned bool
}

// seen records that content sum is bad at this poll and reports whether
// to warn now.
func (b *bad) seen(sum [sha256.Size]byte) bool {
	if !b.set || b.sum != sum {
		*b = bad{set: true, sum: sum}
	}
	b.polls++
	if b.polls < 2 || b.warned {
		return false
	}
	b.warned = true
	return true
}

func (f *Files) pollPair(w *watch, now time.Time) {
	cur := f.pair.Load()
	certPEM, certErr := f.cfg.readFile(certKind)
	keyPEM, keyErr := f.cfg.readFile(keyKind)
	if certErr == nil && keyErr == nil &&
		sha256.Sum256(certPEM) == cur.certSum && sha256.Sum256(keyPEM) == cur.keySum {
		w.pair = bad{}
		if now.After(cur.cert.Leaf.NotAfter) && w.expired != cur {
			w.expired = cur
			f.logger.Warn("tlsfiles: the certificate in use has expired; handshakes will fail until the files hold a valid one",
				"file", f.cfg.fileName(certKind), "not_after", cur.cert.Leaf.NotAfter)
		}
		return
	}
	// Parsed again at every poll, not only when the content changes: a
	// certificate not yet valid becomes valid with time.
	p, err := f.cfg.parsePair(certPEM, certErr, keyPEM, keyErr, now)
	if err != nil {
		if w.pair.seen(contentSum(certPEM, certErr, keyPEM, keyErr)) {
			f.logger.Warn("tlsfiles: keeping the last good certificate and key", "err", err)
		}
		return
	}
	f.pair.Store(p)
	w.pair = bad{}
	f.logger.Info("tlsfiles: loaded a new certificate and key",
		"file", f.cfg.fileName(certKind), "identity", p.id, "not_after", p.cert.Leaf.NotAfter)
}

func (f *Files) pollCA(w *watch) {
	b, err := f.cfg.readFile(caKind)
	if err == nil && sha256.Sum256(b) == f.ca.Load().sum {
		w.ca = bad{}
		return
	}
	var ca *caSet
	if err == nil {
		ca, err = f.cfg.parseCA(b)
	}
	if err != nil {
		if w.ca.seen(contentSum(b, err)) {
			f.logger.Warn("tlsfiles: keeping the last good CA certificates", "err", err)
		}
		return
	}
	f.ca.Store(ca)
	w.ca = bad{}
	f.logger.Info("tlsfiles: loaded new CA certificates",
		"file", f.cfg.fileName(caKind), "certificates", ca.n)
}

// contentSum hashes what a poll read: each file's content, or the error
// reading it, so that "still missing" is the same content twice.
func contentSum(args ...any) [sha256.Size]byte {
	h := sha256.New()
	for _, a := range args {
		var tag byte
		var b []byte
		switch a := a.(type) {
		case []byte:
			tag, b = 'c', a
		case error:
			if a == nil {
				continue
			}
			tag, b = 'e', []byte(a.Error())
		}
		h.Write(binary.BigEndian.AppendUint64([]byte{tag}, uint64(len(b))))
		h.Write(b)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}
