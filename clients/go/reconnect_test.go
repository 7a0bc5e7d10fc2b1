package memevo_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	memevo "github.com/memevo/memevo/clients/go"
)

const (
	// downFor is how long the sidecar stays dead while the old client keeps calling: with gRPC's
	// default backoff (1 s, x1.6 per failed attempt) the attempts are then about 26 and 43 s after the
	// crash, so a sidecar ready after 30-36 s waits 5 s or more for the old client.
	downFor = 30 * time.Second
	// answerWithin bounds ready-to-first-answer: the backoff cap is 1 s, the rest is slack for a loaded machine.
	answerWithin = 3 * time.Second
)

func unavailable(err error) bool {
	var merr *memevo.Error
	return errors.As(err, &merr) && merr.Code == codes.Unavailable
}

// untilAnswered calls Recall every 50 ms until the sidecar answers; how long that took.
func untilAnswered(c *memevo.Client, v []float32) (time.Duration, error) {
	start := time.Now()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := c.Recall(ctx, memevo.VectorQuery(v), memevo.RecallOptions{K: 1})
		cancel()
		if err == nil || !unavailable(err) || time.Since(start) > 30*time.Second {
			return time.Since(start), err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// restart SIGKILLs s and runs the same command again (same socket, same data directory).
func (s *sidecar) restart() error {
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited
	ready := filepath.Join(s.dir, readyFileName)
	_ = os.Remove(ready)
	cmd := exec.Command(s.cmd.Path, s.cmd.Args[1:]...)
	cmd.Stderr = s.stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	s.cmd, s.exited = cmd, make(chan error, 1)
	go func() { s.exited <- cmd.Wait() }()
	deadline := time.Now().Add(readyTimeout)
	for {
		if _, err := os.Stat(ready); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("the restarted sidecar was not ready in time:\n" + s.stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A long-lived client, and one made after the restart, answer within a second or two of the sidecar
// coming back, however long it was down.
func TestClientsAnswerSoonAfterTheSidecarRestarts(t *testing.T) {
	s, err := startSidecar()
	if err != nil {
		t.Fatal(err)
	}
	defer s.stop()
	old, err := memevo.NewClient(s.unix)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	v := axis(3, 0)
	if _, err := old.Remember(ctxT(t), memevo.Input{Content: "before the crash", Vector: v}, memevo.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	for end := time.Now().Add(downFor); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := old.Recall(ctx, memevo.VectorQuery(v), memevo.RecallOptions{K: 1})
		cancel()
		if !unavailable(err) {
			t.Fatalf("a call to a dead sidecar: err = %v, want Unavailable", err)
		}
	}
	if err := s.restart(); err != nil {
		t.Fatal(err)
	}
	fresh, err := memevo.NewClient(s.unix)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	type answer struct {
		took time.Duration
		err  error
	}
	oldDone, freshDone := make(chan answer, 1), make(chan answer, 1)
	go func() { took, err := untilAnswered(old, v); oldDone <- answer{took, err} }()
	go func() { took, err := untilAnswered(fresh, v); freshDone <- answer{took, err} }()
	for name, done := range map[string]chan answer{"the long-lived client": oldDone, "a new client": freshDone} {
		a := <-done
		if a.err != nil {
			t.Fatalf("%s: %v", name, a.err)
		}
		t.Logf("%s first answered %v after the restart", name, a.took)
		if a.took > answerWithin {
			t.Errorf("%s first answered %v after the restart, want <= %v", name, a.took, answerWithin)
		}
	}
}

func TestNewClientWithoutTargetUsesTheDefault(t *testing.T) {
	t.Setenv("MEMEVO_ADDRESS", "127.0.0.1:7070")
	c, err := memevo.NewClient("")
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if got := c.Conn().Target(); got != "127.0.0.1:7070" {
		t.Errorf("target = %q, want $MEMEVO_ADDRESS", got)
	}
	t.Setenv("MEMEVO_ADDRESS", "")
	t.Setenv("XDG_RUNTIME_DIR", "/run/user/1234")
	if got, want := memevo.DefaultTarget(), "unix:///run/user/1234/memevo-"+strconv.Itoa(os.Getuid())+".sock"; got != want {
		t.Errorf("DefaultTarget() = %q, want %q (memevo serve's default)", got, want)
	}
}
