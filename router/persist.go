package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/lmwarden/warden/router/place"
)

// stateVersion is the format version of a saved session table.
const stateVersion = 1

// savedState is the session table as saved to a state file. Homes are keyed
// by replica URL, not rank: ranks are positions in one run's replica list.
type savedState struct {
	Version  int            `json:"version"`
	SavedAt  time.Time      `json:"saved_at"`
	Replicas []string       `json:"replicas"` // the replicas at save time, for reading the file
	Sessions []savedSession `json:"sessions"` // least recently used first
}

type savedSession struct {
	Key        string    `json:"key"`
	Replica    string    `json:"replica"` // home replica URL
	LastSeen   time.Time `json:"last_seen"`
	Context    uint32    `json:"context,omitempty"` // tokens of its last finished turn
	Prompt     uint64    `json:"prompt,omitempty"`
	Cached     uint64    `json:"cached,omitempty"`
	Completion uint64    `json:"completion,omitempty"`
}

// snapshotSessions copies the session table, least recently used first,
// with each home as its replica's URL. Sessions homed on a replica that is
// not current are saved with the URL it had (the core remembers URLs of
// removed replicas), so a later run that has it again sends them home.
func (c *Core) snapshotSessions() savedState {
	c.dyn.mu.Lock() // the URLs and the table as of one instant
	defer c.dyn.mu.Unlock()
	urlOf := make(map[int]string, len(c.dyn.rankOf))
	for u, rank := range c.dyn.rankOf {
		urlOf[rank] = u
	}
	st := savedState{Version: stateVersion, SavedAt: c.clock()}
	for _, r := range c.Replicas() {
		st.Replicas = append(st.Replicas, r.Key())
	}
	c.placer.Sessions(func(t *place.Table) {
		st.Sessions = make([]savedSession, 0, t.Len())
		t.Expire(st.SavedAt)
		for s := range t.Oldest() {
			u, ok := urlOf[s.Home()]
			if !ok {
				continue
			}
			prompt, cached, completion := s.Usage()
			st.Sessions = append(st.Sessions, savedSession{Key: s.Key(), Replica: u, LastSeen: s.LastSeen().UTC(),
				Context: s.Context(), Prompt: prompt, Cached: cached, Completion: completion})
		}
	})
	return st
}

// SaveSessions writes the session table to path as JSON (mode 0600; the
// directory is created), atomically: a temporary file in the same directory
// renamed over path. It returns how many sessions it wrote.
func (c *Core) SaveSessions(path string) (int, error) {
	st := c.snapshotSessions()
	b, err := json.Marshal(st)
	if err != nil {
		return 0, fmt.Errorf("encoding the session table: %w", err)
	}
	if err := writeFileAtomic(path, append(b, '\n')); err != nil {
		return 0, fmt.Errorf("saving the session table: %w", err)
	}
	return len(st.Sessions), nil
}

func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// LoadResult says what LoadSessions did with a state file.
type LoadResult struct {
	Restored int       // sessions put back in the table
	Expired  int       // idle past the session TTL
	Unknown  int       // homed on a URL that is not a current replica (dropped: they are placed anew)
	SavedAt  time.Time // when the file was written; zero if there was no file
}

// LoadSessions puts the sessions of a state file written by SaveSessions
// back into the table, each on the current replica with its saved URL,
// keeping their last-use order and time. A missing file is no error (a
// first start); a damaged one is. Sessions already in the table are kept
// as they are. Call it before serving.
func (c *Core) LoadSessions(path string) (LoadResult, error) {
	var res LoadResult
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return res, nil
	}
	if err != nil {
		return res, fmt.Errorf("reading the session table: %w", err)
	}
	var st savedState
	if err := json.Unmarshal(b, &st); err != nil {
		return res, fmt.Errorf("session table %s is damaged (%v); move it away to start afresh", path, err)
	}
	if st.Version != stateVersion {
		return res, fmt.Errorf("session table %s has format version %d, this warden reads %d", path, st.Version, stateVersion)
	}
	res.SavedAt = st.SavedAt
	c.dyn.mu.Lock() // the replicas and the table as of one instant
	defer c.dyn.mu.Unlock()
	rankOf := map[string]int{}
	for _, r := range c.Replicas() {
		rankOf[r.Key()] = r.rank
	}
	cutoff := c.clock().Add(-c.cfg.SessionTTL)
	c.placer.Sessions(func(t *place.Table) {
		for _, s := range st.Sessions {
			rank, ok := rankOf[s.Replica]
			switch {
			case s.Key == "" || t.Peek(s.Key) != nil:
			case s.LastSeen.Before(cutoff):
				res.Expired++
			case !ok:
				res.Unknown++
			default:
				t.Restore(s.Key, rank, s.LastSeen, s.Context, s.Prompt, s.Cached, s.Completion)
				res.Restored++
			}
		}
	})
	return res, nil
}

// PersistSessions saves the session table to path every interval until ctx
// is done, logging failures (once per kind of error). It does not save on
// return: the caller saves once more after the last request has finished.
func (c *Core) PersistSessions(ctx context.Context, path string, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	lastErr := ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		_, err := c.SaveSessions(path)
		switch {
		case err != nil && err.Error() != lastErr:
			c.log.Warn("saving the session table", "path", path, "error", err)
			lastErr = err.Error()
		case err == nil && lastErr != "":
			c.log.Info("session table saved again", "path", path)
			lastErr = ""
		}
	}
}
