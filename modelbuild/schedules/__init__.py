"""schedules: schedule records and everything that makes, applies or checks them: record
files, Python schedules, MetaSchedule databases, tuning, sampling, variants, status.

May import: core, targets, measure.
"""
