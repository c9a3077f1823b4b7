package testenv

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// freePorts asks the kernel for n distinct free TCP ports on 127.0.0.1.
// Every listener stays open until all n are taken: a port given back
// before the next is asked for can be handed out again, and a broker
// refuses two listeners on one port.
func freePorts(n int) ([]int, error) {
	var lc net.ListenConfig
	ports := make([]int, 0, n)
	for range n {
		l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("listening on a free port: %w", err)
		}
		defer l.Close()
		addr, ok := l.Addr().(*net.TCPAddr)
		if !ok {
			return nil, fmt.Errorf("unexpected listener address %v", l.Addr())
		}
		ports = append(ports, addr.Port)
	}
	return ports, nil
}

// freePort is freePorts(1).
func freePort() (int, error) {
	ports, err := freePorts(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// Process is a child process of a test (a server, or the bridge binary of
// the end-to-end tests) whose exit one goroutine observes. The kernel kills
// it when the test binary dies (on Linux), so a test killed by its timeout
// leaves no process behind.
type Process struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// StartProcess starts cmd with its stdout and stderr appended to the file
// logPath (created when missing; left as cmd has them when logPath is
// empty).
func StartProcess(cmd *exec.Cmd, logPath string) (*Process, error) {
	if logPath != "" {
		f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, fmt.Errorf("opening log: %w", err)
		}
		// The child has its own descriptor once started.
		defer f.Close()
		cmd.Stdout, cmd.Stderr = f, f
	}
	setParentDeath(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", cmd.Path, err)
	}
	p := &Process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Pid returns the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err is what waiting for the process returned (nil for exit status 0, an
// *exec.ExitError otherwise); it is nil while the process runs.
func (p *Process) Err() error {
	if !p.Exited() {
		return nil
	}
	return p.err
}

// Kill9 sends SIGKILL and waits for the exit.
func (p *Process) Kill9() {
	if p.Exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Term sends SIGTERM and waits up to grace for the exit, then sends SIGKILL.
// It returns the exit code, -1 when it had to kill the process.
func (p *Process) Term(grace time.Duration) int {
	if !p.Exited() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-p.done:
	case <-time.After(grace):
		p.Kill9()
		return -1
	}
	return p.cmd.ProcessState.ExitCode()
}

// Tail returns the last n lines of a log file, for failure messages.
func Tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

var errExited = errors.New("process exited")
