// Package bench compares lameduck's check engine with two peer health
// libraries, github.com/alexliesenfeld/health and
// github.com/hellofresh/health-go, doing the same work in the same run. It
// is a module of its own so that the core module keeps no dependency on
// them; it contains only tests and benchmarks. See README.md for the
// command and the measured numbers.
package bench
