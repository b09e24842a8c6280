"""Benchmarks and the GPU check: run by `normlab bench …`, kept out of the product packages."""
