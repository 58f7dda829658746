"""What a kernel's figures mean: the profile counters every backend reports (counters.py) and
the roofline, percent of peak and the least latency a correct kernel can have (roofline.py).
"""
