"""addrsim: prove that GPU kernels compute their buffer addresses correctly, or show the
smallest input on which they do not."""

__version__ = "0.1.0"
