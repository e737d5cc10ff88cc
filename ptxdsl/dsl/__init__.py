"""What kernel bodies call: ``ptx`` (a namespace of re-exports), ``reg``, ``smem`` and the
helpers behind them. Each module records PTX instructions into the active trace."""
