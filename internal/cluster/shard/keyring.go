package shard

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
)

// maxKeyFileSize bounds what is read of a key file: a few hundred keys.
const maxKeyFileSize = 64 << 10

// ReadKeyFile reads a gossip keyring file: one key a line, each the
// standard base64 (padded, as `openssl rand -base64 32` prints it) of 16,
// 24 or 32 random bytes (AES-128, -192 or -256); blank lines and lines
// starting with '#' are skipped. The first key encrypts what this replica
// sends; every key is tried on what it receives. The errors name the file
// and the problem, and the line for a bad key.
func ReadKeyFile(path string) ([][]byte, error) {
	data, err := readKeyFile(path)
	if err != nil {
		return nil, err
	}
	return parseKeys(path, data)
}

func readKeyFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, keyFileError(path, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxKeyFileSize+1))
	if err != nil {
		return nil, keyFileError(path, err)
	}
	if len(data) > maxKeyFileSize {
		return nil, fmt.Errorf("shard: gossip key file %s: larger than %d bytes; not a key file?", path, maxKeyFileSize)
	}
	return data, nil
}

// keyFileError words an error reading path without repeating the path
// that os's errors carry.
func keyFileError(path string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("shard: gossip key file %s: does not exist", path)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("shard: gossip key file %s: not readable (permission denied)", path)
	}
	return fmt.Errorf("shard: gossip key file %s: cannot read: %w", path, err)
}

// parseKeys parses the content of the key file at path (ReadKeyFile). It
// never puts a key, or any part of one, in an error.
func parseKeys(path string, data []byte) ([][]byte, error) {
	var (
		keys  [][]byte
		lines []int // line of each key
	)
	for i, line := range strings.Split(string(data), "\n") {
		n := i + 1
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, err := base64.StdEncoding.DecodeString(line)
		if err != nil {
			// err quotes no input, only an offset.
			return nil, fmt.Errorf("shard: gossip key file %s: line %d: not a base64 key (make one with `openssl rand -base64 32`): %w", path, n, err)
		}
		if err := memberlist.ValidateKey(key); err != nil {
			return nil, fmt.Errorf("shard: gossip key file %s: line %d: key of %d bytes; want 16, 24 or 32 (AES-128, -192 or -256)", path, n, len(key))
		}
		if j := slices.IndexFunc(keys, func(k []byte) bool { return bytes.Equal(k, key) }); j >= 0 {
			return nil, fmt.Errorf("shard: gossip key file %s: line %d: the same key as line %d", path, n, lines[j])
		}
		keys = append(keys, key)
		lines = append(lines, n)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("shard: gossip key file %s: no key (one base64 key a line; make one with `openssl rand -base64 32`)", path)
	}
	return keys, nil
}

// loadKeyring gives mlc the keyring of GossipKeyFile, if set, and
// returns the checksum of the file's content in use (zero without one).
func (m *Membership) loadKeyring(mlc *memberlist.Config) ([sha256.Size]byte, error) {
	var keySum [sha256.Size]byte
	if m.cfg.GossipKeyFile == "" {
		return keySum, nil
	}
	data, err := readKeyFile(m.cfg.GossipKeyFile)
	if err != nil {
		return keySum, err
	}
	keys, err := parseKeys(m.cfg.GossipKeyFile, data)
	if err != nil {
		return keySum, err
	}
	if mlc.Keyring, err = newKeyring(keys); err != nil {
		return keySum, err
	}
	m.metrics.keys.Set(float64(len(keys)))
	m.encrypted = true
	return sha256.Sum256(data), nil
}

// newKeyring returns a memberlist keyring holding keys, keys[0] primary.
func newKeyring(keys [][]byte) (*memberlist.Keyring, error) {
	kr, err := memberlist.NewKeyring(keys, keys[0])
	if err != nil {
		return nil, fmt.Errorf("shard: gossip keyring: %w", err)
	}
	return kr, nil
}

// setKeys makes kr hold exactly keys, keys[0] primary, in place: memberlist
// reads the keyring for every packet and stream, so the change applies to
// the next one. It reports whether anything changed.
//
// Order matters for peers: the new primary is installed before it is used,
// and a key is removed only after the primary moved off it. Stale keys are
// removed before the other new keys are added: memberlist's RemoveKey
// shifts the keys after the removed one within the slice that GetKeys
// handed to readers (gossip goroutines decrypting), and a removed key
// that is last shifts nothing. In the documented rotation (add a key
// second; move it first; remove the old one) that is always the case.
func setKeys(kr *memberlist.Keyring, keys [][]byte) (bool, error) {
	has := func(set [][]byte, k []byte) bool {
		return slices.ContainsFunc(set, func(s []byte) bool { return bytes.Equal(s, k) })
	}
	before := slices.Clone(kr.GetKeys())
	if !bytes.Equal(kr.GetPrimaryKey(), keys[0]) {
		if err := kr.AddKey(keys[0]); err != nil {
			return false, fmt.Errorf("shard: gossip keyring: add key: %w", err)
		}
		if err := kr.UseKey(keys[0]); err != nil {
			return false, fmt.Errorf("shard: gossip keyring: use key: %w", err)
		}
	}
	cur := slices.Clone(kr.GetKeys())
	for i := len(cur) - 1; i > 0; i-- { // cur[0] is keys[0]
		if !has(keys, cur[i]) {
			if err := kr.RemoveKey(cur[i]); err != nil {
				return false, fmt.Errorf("shard: gossip keyring: remove key: %w", err)
			}
		}
	}
	for _, k := range keys[1:] {
		if err := kr.AddKey(k); err != nil {
			return false, fmt.Errorf("shard: gossip keyring: add key: %w", err)
		}
	}
	after := kr.GetKeys()
	return !slices.EqualFunc(before, after, bytes.Equal), nil
}

// keyLoop re-reads the key file every GossipKeyInterval and, when its
// content changed, updates the keyring in place. A file that cannot be
// read or parsed leaves the keyring as it is, with a Warn once per bad
// content (or read error).
func (m *Membership) keyLoop(ctx context.Context, kr *memberlist.Keyring, seen [sha256.Size]byte) {
	defer m.wg.Done()
	path := m.cfg.GossipKeyFile
	log := m.log.With("file", path)
	var lastErr string // the last read error warned about
	t := time.NewTicker(m.cfg.GossipKeyInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		data, err := readKeyFile(path)
		if err != nil {
			// Mid-rotation a file may be briefly absent (replaced by a
			// rename); the keyring in use stays.
			if err.Error() != lastErr {
				lastErr = err.Error()
				m.metrics.keyErrors.Inc()
				log.Warn("shard: gossip key file unreadable; keeping the current keyring", "err", err)
			}
			continue
		}
		lastErr = ""
		sum := sha256.Sum256(data)
		if sum == seen {
			continue
		}
		seen = sum
		keys, err := parseKeys(path, data)
		if err != nil {
			m.metrics.keyErrors.Inc()
			log.Warn("shard: bad gossip key file; keeping the current keyring", "err", err)
			continue
		}
		changed, err := setKeys(kr, keys)
		if err != nil {
			// Unreachable: parseKeys checked every key's length.
			m.metrics.keyErrors.Inc()
			log.Warn("shard: updating the gossip keyring", "err", err)
			continue
		}
		m.metrics.keys.Set(float64(len(keys)))
		m.metrics.keyReloads.Inc()
		if changed {
			log.Info("shard: gossip keyring updated from the key file", "keys", len(keys))
		}
	}
}
