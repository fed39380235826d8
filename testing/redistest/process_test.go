package redistest

import "testing"

func TestStartProcess(t *testing.T) {
	addr, stop, err := StartProcess()
	if err != nil {
		t.Fatal(err)
	}
	if err := ping(addr); err != nil {
		stop()
		t.Fatalf("PING %s: %v", addr, err)
	}
	stop()
	if err := ping(addr); err == nil {
		t.Errorf("%s still answers PING after stop", addr)
	}
	stop() // a second stop does nothing
}

// TestProcessHandleFaults: a Process kills, restarts (same address),
// pauses and resumes its server with errors instead of a test's failures,
// and Stop leaves nothing answering, a paused server included.
func TestProcessHandleFaults(t *testing.T) {
	p, err := StartProcessHandle()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	addr := p.Addr()
	step := func(name string, err error, answers bool) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := ping(addr) == nil; got != answers {
			t.Fatalf("after %s: %s answers PING = %v, want %v", name, addr, got, answers)
		}
	}
	step("start", nil, true)
	pid := p.Pid()
	if pid == 0 {
		t.Fatal("Pid is 0 for a running server")
	}
	step("Kill", p.Kill(), false)
	step("Restart", p.Restart(), true)
	if p.Addr() != addr {
		t.Errorf("restarted on %s, want %s", p.Addr(), addr)
	}
	if p.Pid() == pid || p.Pid() == 0 {
		t.Errorf("pid after Restart = %d, before %d: want a new process", p.Pid(), pid)
	}
	step("Pause", p.Pause(), false)
	step("Resume", p.Resume(), true)
	step("Pause", p.Pause(), false)
	p.Stop()
	step("Stop", nil, false)
	if err := p.Resume(); err == nil {
		t.Error("Resume after Stop: no error")
	}
}
