// Command fakecri serves the in-memory fake CRI runtime from k8s.io/cri-client on a unix
// socket, so that an unmodified kubelet can run on a machine without a container runtime.
package main

import (
	"flag"
	"log"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/cri-client/pkg/fake"
)

func main() {
	endpoint := flag.String("listen", "", "unix socket path to serve the CRI on, e.g. /tmp/cri.sock")
	flag.Parse()
	if *endpoint == "" {
		log.Fatal("fakecri: --listen PATH is required")
	}
	_ = os.Remove(*endpoint)
	runtime := fake.NewFakeRemoteRuntime()
	if err := runtime.Start("unix://" + *endpoint); err != nil {
		log.Fatalf("fakecri: start on %s: %v", *endpoint, err)
	}
	log.Printf("fakecri: serving on %s", *endpoint)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	runtime.Stop()
}
