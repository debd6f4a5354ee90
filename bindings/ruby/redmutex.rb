# frozen_string_literal: true

# redmutex for Ruby: distributed locks for Redis.
#
#   require "redmutex"
#   client = Redmutex::Client.new("redis://127.0.0.1:6379/0")
#   client.lock("jobs:nightly", timeout: 10).synchronize { run_nightly_job }
#
# Client, Lock, their methods and the exception classes come from the
# generated extension (redmutex_native, from bindings/redmutex.i); this file
# adds what is plain Ruby.
require "redmutex_native"

module Redmutex
  VERSION = "1.0.0"

  # Base class of every error redmutex raises; +code+ is the C library's
  # negative REDMUTEX_E* code. Subclasses: LockTimeout, NotOwnedError,
  # LockLostError, ConnectionError, InvalidArgument, ProtocolError, ...
  class Error
    def initialize(message = nil, code = 0)
      super(message)
      @code = code
    end
  end

  class Client
    # Runs the block under the lock +name+ (a fresh lock object per call, so
    # threads calling it exclude each other). +reentrant+ uses rlock; the
    # other options are those of #lock (+timeout:+, +lease:+, ...).
    def synchronize(name, reentrant: false, **options, &block)
      (reentrant ? rlock(name, **options) : lock(name, **options)).synchronize(&block)
    end

    def inspect
      "#<Redmutex::Client #{id} servers=#{server_count}#{closed? ? ' closed' : ''}>"
    end
  end

  class Lock
    # Tries once; true when acquired.
    def try_lock
      acquire(0)
    end

    def inspect
      "#<Redmutex::#{kind == :rlock ? 'RLock' : 'Lock'} #{name.inspect} #{state}>"
    end
  end
end
