# frozen_string_literal: true

require_relative "helper"

# The error classes are the table that redmutex.h, bindings/common/errors.c and the Python
# package agree on (tests/errortable.py), and a raised error carries its class's code.
class TestErrors < Minitest::Test
  TABLE = IO.popen(["python3", File.expand_path("../../../tests/errortable.py", __dir__), "--list"], &:readlines)
            .map(&:split)

  def test_error_classes_match_the_c_codes_and_the_python_classes
    refute_empty TABLE, "tests/errortable.py --list printed nothing (its message is above)"
    TABLE.each do |name, parent, _tag, _code|
      cls = Redmutex.const_get(name)
      assert_operator cls, :<, (parent == "-" ? StandardError : Redmutex.const_get(parent)), name
    end
    assert_same Redmutex::Error, Redmutex::RedMutexError
    defined = Redmutex.constants.map { |c| Redmutex.const_get(c) }
                      .select { |c| c.is_a?(Class) && c <= Redmutex::Error }.map { |c| c.name.split("::").last }
    assert_equal TABLE.map(&:first).sort, defined.uniq.sort
  end

  def test_a_raised_error_has_the_code_of_its_class_in_the_table
    codes = TABLE.to_h { |name, _parent, _tag, code| [name, code.to_i] }
    client = Redmutex::Client.new(RedisServer.url)
    raised = [
      assert_raises(Redmutex::InvalidArgument) { client.lock("") },
      assert_raises(Redmutex::NotOwnedError) { client.lock("rb:errors").release }
    ]
    client.close
    raised << assert_raises(Redmutex::ClosedError) { client.lock("rb:errors") }
    raised.each { |e| assert_equal codes.fetch(e.class.name.split("::").last), e.code, e.class.name }
  end
end
