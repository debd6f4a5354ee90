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
  VERSION = "1.1.0"

  class << self
    # Where the library's log messages go (renewal failing, lock lost, a
    # server unreachable, and their recoveries): a Logger, or anything with
    # #warn and #info. nil (the default): Kernel#warn. Messages are handed
    # over on the calling thread at the end of a call into redmutex.
    attr_accessor :logger

    # Called by the extension with each message (level 30 WARNING, 20 INFO).
    def deliver_log(level, message)
      if logger
        level >= 30 ? logger.warn(message) : logger.info(message)
      else
        warn("redmutex: #{level >= 30 ? 'WARNING' : 'INFO'}: #{message}")
      end
    end
  end

  # Locks with an on_lost block, by id; weak, so watching keeps no lock alive.
  WATCHED = ObjectSpace::WeakMap.new
  private_constant :WATCHED

  # Base class of every error redmutex raises; +code+ is the C library's
  # negative REDMUTEX_E* code. Subclasses: LockTimeout, NotOwnedError,
  # LockLostError, ConnectionError, InvalidArgument, ProtocolError, ...
  class Error
    def initialize(message = nil, code = 0)
      super(message)
      @code = code
    end
  end

  # A Client or Lock stands for one C object, which is not copied: a copy
  # would share it, and each would free it.
  module Uncopyable
    def initialize_copy(_original)
      raise TypeError, "a #{self.class} cannot be copied (dup, clone); use the same object, or make another"
    end
  end
  private_constant :Uncopyable

  class Client
    include Uncopyable

    # Runs the block under the lock +name+ (a fresh lock object per call, so
    # threads calling it exclude each other). +reentrant+ uses rlock; the
    # other options are those of #lock (+timeout:+, +lease:+, ...).
    def synchronize(name, reentrant: false, **options, &block)
      (reentrant ? rlock(name, **options) : lock(name, **options)).synchronize(&block)
    end

    # An IO that is readable while lost-lock news is queued, for IO.select or
    # an event library; call #dispatch_events when it is. Never read it.
    def event_io
      @event_io ||= IO.for_fd(event_fd, autoclose: false)
    end

    # Runs the on_lost blocks of this client's locks for the news queued so
    # far, on the calling thread, and returns how many events there were.
    # Never blocks.
    def dispatch_events
      count = 0
      while (event = next_event)
        lock_id, state, owner = event
        lock = WATCHED[lock_id]
        lock&.lost_handler&.call(lock, state, owner)
        count += 1
      end
      count
    end

    def inspect
      "#<Redmutex::Client #{id} servers=#{server_count}#{closed? ? ' closed' : ''}>"
    rescue Redmutex::Error
      "#<Redmutex::Client (not made by Client.new)>" # allocated without it: see redmutex.i
    end
  end

  class Lock
    include Uncopyable

    # Tries once; true when acquired.
    def try_lock
      acquire(0)
    end

    # The block is called as block.(lock, state, owner) when a hold of this
    # lock turns :renewal_failing or :lost (or :held again), by
    # Client#dispatch_events on the thread that calls it: Ruby code never
    # runs on the library's watchdog thread. #lost? asks without a callback.
    def on_lost(&block)
      @lost_handler = block
      WATCHED[id] = self
      self
    end

    attr_reader :lost_handler

    def inspect
      cls = { rlock: "RLock", fair: "FairLock", read: "ReadLock", write: "WriteLock" }.fetch(kind, "Lock")
      "#<Redmutex::#{cls} #{name.inspect} #{state}>"
    rescue Redmutex::Error
      "#<Redmutex::Lock (not made by a client)>" # allocated without one: see redmutex.i
    end
  end

  # At most +permits+ holders at once (client.semaphore(name, permits)):
  # sem.synchronize { } holds one permit for the block; acquire returns a
  # permit id (nil when the wait ran out) that release gives back.
  class Semaphore
    include Uncopyable

    # Tries once; the permit id, or nil.
    def try_acquire(permits = 1)
      acquire(0, permits)
    end

    # The block is called as block.(semaphore, state, permit_id) when a held
    # permit turns :renewal_failing or :lost (or :held again), by
    # Client#dispatch_events, as Lock#on_lost.
    def on_lost(&block)
      @lost_handler = block
      WATCHED[id] = self
      self
    end

    attr_reader :lost_handler

    def inspect
      "#<Redmutex::Semaphore #{name.inspect} permits=#{permits}>"
    rescue Redmutex::Error
      "#<Redmutex::Semaphore (not made by a client)>"
    end
  end
end
