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

// TestProcessKillRestart: a Process handle kills its server (PING fails,
// Pid is gone), restarts it on the same address with empty data, and Stop
// leaves nothing answering.
func TestProcessKillRestart(t *testing.T) {
	p, err := StartProcessHandle()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	addr, pid := p.Addr(), p.Pid()
	if pid == 0 {
		t.Fatal("Pid is 0 for a running server")
	}
	if err := ping(addr); err != nil {
		t.Fatalf("PING %s: %v", addr, err)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := ping(addr); err == nil {
		t.Fatalf("%s answers PING after Kill", addr)
	}
	if err := p.Restart(); err != nil {
		t.Fatal(err)
	}
	if p.Addr() != addr {
		t.Errorf("restarted on %s, want %s", p.Addr(), addr)
	}
	if p.Pid() == pid || p.Pid() == 0 {
		t.Errorf("pid after restart = %d, before %d: want a new process", p.Pid(), pid)
	}
	if err := ping(addr); err != nil {
		t.Fatalf("PING %s after Restart: %v", addr, err)
	}
	p.Stop()
	if err := ping(addr); err == nil {
		t.Errorf("%s still answers PING after Stop", addr)
	}
}
