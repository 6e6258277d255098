"""Driving a running graph from outside over DDS: the demo, graph evaluation, scripted operators."""
