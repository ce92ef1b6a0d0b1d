"""The batch sizes a lesson measures when it draws a whole throughput curve: powers of two from
1 to 64, the knob's range. The cache warmer measures them before a class, and the capacity
lesson reads the same points, so one warm cache serves both."""

LADDER = (1, 2, 4, 8, 16, 32, 64)
