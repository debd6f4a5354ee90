// The Go side of the peer benchmarks: go-redsync v4 on go-redis v9, behind
// the line protocol of bench/peers (driver.py documents it). Libraries:
//
//	redsync        rs.NewMutex(name) with its defaults (8 s expiry, 32 tries,
//	               retry after 50-250 ms); several URLs: one pool per server
//	redsync:tuned  the same, retrying after 5 ms, with no cap on tries
package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
	_ "unsafe" // go:linkname

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredislib "github.com/redis/go-redis/v9"
)

// CLOCK_MONOTONIC in ns, the clock every peer program reports times on.
//
//go:linkname nanotime runtime.nanotime
func nanotime() int64

func cpuNs() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

var pools = map[string]redis.Pool{}
var mutexes = map[string]*redsync.Mutex{}

func pool(url string) redis.Pool {
	if p, ok := pools[url]; ok {
		return p
	}
	opt, err := goredislib.ParseURL(url)
	if err != nil {
		panic(err)
	}
	p := goredis.NewPool(goredislib.NewClient(opt))
	pools[url] = p
	return p
}

func mutex(lib, name string, urls []string) *redsync.Mutex {
	key := lib + " " + name + " " + strings.Join(urls, " ")
	if m, ok := mutexes[key]; ok {
		return m
	}
	var ps []redis.Pool
	for _, u := range urls {
		ps = append(ps, pool(u))
	}
	var opts []redsync.Option
	switch lib {
	case "redsync":
	case "redsync:tuned":
		opts = append(opts, redsync.WithRetryDelay(5*time.Millisecond), redsync.WithTries(1<<30))
	default:
		panic("unknown library " + lib)
	}
	m := redsync.New(ps...).NewMutex(name, opts...)
	mutexes[key] = m
	return m
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

func pairs(m *redsync.Mutex, seconds float64) string {
	var n int64
	t0, c0 := nanotime(), cpuNs()
	end := t0 + int64(seconds*1e9)
	t := t0
	for t < end {
		for i := 0; i < 10; i++ {
			must(m.Lock())
			_, err := m.Unlock()
			must(err)
		}
		n += 10
		t = nanotime()
	}
	return fmt.Sprintf("ok %d %d %d", n, t-t0, cpuNs()-c0)
}

func sleepUntil(t int64) {
	if d := t - nanotime(); d > 0 {
		time.Sleep(time.Duration(d))
	}
}

func contend(m *redsync.Mutex, start, end, holdUs int64) string {
	var b strings.Builder
	failures := 0
	sleepUntil(start)
	for nanotime() < end {
		if err := m.LockContext(context.Background()); err != nil {
			failures++ // ErrFailed: the tries ran out
			continue
		}
		got := nanotime()
		sleepUntil(got + holdUs*1000)
		rel := nanotime()
		_, err := m.Unlock()
		must(err)
		fmt.Fprintf(&b, " %d %d %d", got, rel, nanotime())
	}
	return fmt.Sprintf("ok %d%s", failures, b.String())
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	out := bufio.NewWriter(os.Stdout)
	for in.Scan() {
		w := strings.Fields(in.Text())
		if len(w) == 0 {
			continue
		}
		if w[0] == "quit" {
			break
		}
		var urls []string
		var rest []int64
		var seconds float64
		for _, t := range w[3:] {
			if strings.HasPrefix(t, "redis://") {
				urls = append(urls, t)
			} else {
				v, _ := strconv.ParseFloat(t, 64)
				seconds = v
				n, _ := strconv.ParseInt(t, 10, 64)
				rest = append(rest, n)
			}
		}
		m := mutex(w[1], w[2], urls)
		var reply string
		switch w[0] {
		case "pairs":
			reply = pairs(m, seconds)
		case "contend":
			reply = contend(m, rest[0], rest[1], rest[2])
		case "acquire":
			fmt.Fprintf(out, "started %d\n", nanotime())
			out.Flush()
			must(m.Lock())
			reply = fmt.Sprintf("ok %d", nanotime())
		case "release":
			t0 := nanotime()
			_, err := m.Unlock()
			must(err)
			reply = fmt.Sprintf("ok %d %d", t0, nanotime())
		default:
			panic("unknown command " + w[0])
		}
		fmt.Fprintln(out, reply)
		out.Flush()
	}
}
