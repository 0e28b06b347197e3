module github.com/lameduck/lameduck

go 1.26
