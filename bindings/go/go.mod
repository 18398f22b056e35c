module github.com/kvrt/kvrt/bindings/go

go 1.24
