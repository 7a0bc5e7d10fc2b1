package memevo_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// syncBuffer collects the sidecar's stderr; it is read while the process may still write.
type syncBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf.Len() > 1<<20 {
		return len(p), nil // enough to explain a failure
	}
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// sidecar is a real memevo sidecar on a temporary data directory: vectors only
// (--embedder none), a unix socket and a TCP port on 127.0.0.1.
type sidecar struct {
	cmd    *exec.Cmd
	dir    string
	unix   string
	tcp    string
	stderr *syncBuffer
	exited chan error
}

const (
	dimension      = 8
	readyTimeout   = 60 * time.Second
	stopTimeout    = 15 * time.Second
	readyFileName  = "ready.json"
	socketFileName = "memevo.sock"
)

// startSidecar runs `python -m memevo.sidecar.cli serve` ($MEMEVO_PYTHON, else the first of python3 and
// python on PATH, as the Java tests choose) with the extra serve arguments and waits for its ready file.
// memevo must be importable (pip install -e '.[test]' at the repository root).
func startSidecar(extra ...string) (*sidecar, error) {
	dir, err := os.MkdirTemp("", "memevo-go-")
	if err != nil {
		return nil, err
	}
	python := os.Getenv("MEMEVO_PYTHON")
	for _, name := range []string{"python3", "python"} {
		if python != "" {
			break
		}
		if _, err := exec.LookPath(name); err == nil {
			python = name
		}
	}
	if python == "" {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("no python3 or python on PATH: set MEMEVO_PYTHON to the interpreter that has memevo")
	}
	ready := filepath.Join(dir, readyFileName)
	cmd := exec.Command(python, "-m", "memevo.sidecar.cli", "serve",
		"--data", filepath.Join(dir, "data"),
		"--listen", "unix://"+filepath.Join(dir, socketFileName),
		"--listen", "127.0.0.1:0",
		"--embedder", "none",
		"--dimension", fmt.Sprint(dimension),
		"--ready-file", ready,
	)
	cmd.Args = append(cmd.Args, extra...)
	s := &sidecar{cmd: cmd, dir: dir, stderr: &syncBuffer{}, exited: make(chan error, 1)}
	cmd.Stderr = s.stderr
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s: %w", python, err)
	}
	go func() { s.exited <- cmd.Wait() }()
	deadline := time.Now().Add(readyTimeout)
	for {
		select {
		case err := <-s.exited:
			os.RemoveAll(dir)
			return nil, fmt.Errorf("the sidecar exited before it was ready (%v):\n%s", err, s.stderr)
		case <-time.After(50 * time.Millisecond):
		}
		var file struct {
			Listen []string `json:"listen"`
		}
		if data, err := os.ReadFile(ready); err == nil && json.Unmarshal(data, &file) == nil {
			for _, addr := range file.Listen {
				if strings.HasPrefix(addr, "unix:") {
					s.unix = addr
				} else {
					s.tcp = addr
				}
			}
			if s.unix == "" || s.tcp == "" {
				s.stop()
				return nil, fmt.Errorf("unexpected ready file: %s", data)
			}
			return s, nil
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("the sidecar was not ready after %v:\n%s", readyTimeout, s.stderr)
		}
	}
}

// stop sends SIGTERM, waits for the exit (SIGKILL after stopTimeout) and removes the directory.
func (s *sidecar) stop() error {
	defer os.RemoveAll(s.dir)
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.exited:
		if err != nil {
			return fmt.Errorf("the sidecar exited with %v:\n%s", err, s.stderr)
		}
		return nil
	case <-time.After(stopTimeout):
		_ = s.cmd.Process.Kill()
		<-s.exited
		return fmt.Errorf("the sidecar did not stop within %v of SIGTERM", stopTimeout)
	}
}
