"""Prometheus metric definitions, Grafana dashboard and Prometheus config."""
