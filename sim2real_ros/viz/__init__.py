"""Foxglove views of the graph and of recordings (docs/viz.md), without rclpy.

kinematics: URDF forward kinematics to frame transforms and the tool point's planned path;
model: the URDF's visuals as 3D scene primitives; channels: the Foxglove channel table and the
publisher that writes to a Foxglove context (WebSocket server or MCAP file); router: ROS-shaped
messages (rclpy or a bag's) to that publisher, with per-topic rates and drops; export: bag to
Foxglove MCAP; replay: paced, seekable replay of a bag to a server; layout: the default layout.
"""
