"""Episodes from recordings: what a bag says the robot saw and did, as arrays.

Topic resolution (`topics`), reading a bag's samples (`bag_source`, `recording`), the options of
reading and aligning them (`options`), and the supervised examples fine-tuning and validation cut
from them (`dataset`). No ROS graph: a bag is read with our own reader (sim2real_ros.bags).
"""
