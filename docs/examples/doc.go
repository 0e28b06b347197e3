// Package examples holds the framework examples of docs/frameworks.md (chi,
// Echo, Gin), each a main package with a test that drives it through a
// whole Lifecycle, a test that keeps the page's code equal to them, and a
// test that compiles the README's "Use it in a service" snippet.
package examples
