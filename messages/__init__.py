"""Typed, immutable messages exchanged by toolprep's actors.

Nothing here has behaviour beyond construction and (de)serialisation, so any
role can depend on these modules without pulling in another role.
"""
