"""What every test layer shares to run things: free ports, child processes that die with
the test run, and the one launcher of the served function (served.py).

Pure standard library plus requests: importing it needs no cryptography, Go or apt, so the
unit and HTTP tests can use it with only `.[test]` installed.
"""
