"""sim2real_ros: run a sim-trained robot policy on a real robot safely, and measure the transfer."""

__version__ = "0.1.0"
