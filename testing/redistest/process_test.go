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
