// A Go program for ntprof's tests: main.hot (never inlined) runs its loop, into which the compiler inlines
// main.mix, as many times as its argument says (a fixed amount of work: its samples count CPU time, whatever
// the machine's load).
package main

import (
	"fmt"
	"os"
	"strconv"
)

// hot calls sink, so that it has a frame of its own: the caller of a function without one (a leaf with no
// stack frame) is invisible to a frame-pointer walk, in Go as in C.
//
//go:noinline
func hot(n int) int {
	s := 0
	for i := 0; i < n; i++ {
		s += mix(i)
	}
	return s + sink(s)
}

//go:noinline
func sink(s int) int { return s & 1 }

func mix(i int) int { return i*i ^ (i >> 3) }

func main() {
	calls, _ := strconv.Atoi(os.Args[1])
	t := 0
	for c := 0; c < calls; c++ {
		t += hot(200000)
	}
	fmt.Fprintln(os.Stderr, t%7)
}
