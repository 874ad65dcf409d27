// The libFuzzer driver: one executable for every target, chosen by CONCORD_FUZZ_TARGET. Built
// only by `make fuzz` (CONCORD_FUZZ=1, `-sanitize=fuzzer,address`). SwiftPM names an
// executable's entry point after its module, so libFuzzer's own `main` is not linked in: this
// top-level code hands the command line to libFuzzer through `LLVMFuzzerRunDriver`.
import Foundation
import FuzzTargets

/// libFuzzer's driver (compiler-rt's FuzzerInterface.h).
@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(
    _ argc: UnsafeMutablePointer<Int32>,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>>,
    _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> Int32
) -> Int32

/// The target this process fuzzes.
let fuzzTarget: FuzzTarget = {
    let name = ProcessInfo.processInfo.environment["CONCORD_FUZZ_TARGET"] ?? ""
    guard let target = FuzzTarget.named(name) else {
        let names = FuzzTarget.all.map(\.name).joined(separator: ", ")
        FileHandle.standardError.write(Data("set CONCORD_FUZZ_TARGET to one of: \(names)\n".utf8))
        exit(64)
    }
    return target
}()

/// The file name errors name (the fuzzer's inputs have none).
let fuzzInputURL = URL(fileURLWithPath: "/fuzz-input/\(fuzzTarget.name).input")

/// One input through the target; libFuzzer's callback (also exported under its conventional
/// name, which libFuzzer's own objects refer to).
@_cdecl("LLVMFuzzerTestOneInput")
func fuzzTestOneInput(_ bytes: UnsafePointer<UInt8>?, _ count: Int) -> Int32 {
    let data = bytes.map { Data(bytes: $0, count: count) } ?? Data()
    do {
        _ = try fuzzTarget.run(data, url: fuzzInputURL)
    } catch {
        // A property that must hold did not: crash, so that libFuzzer saves the input.
        fatalError("finding: \(error)")
    }
    return 0
}

var argc = CommandLine.argc
var argv = CommandLine.unsafeArgv
exit(LLVMFuzzerRunDriver(&argc, &argv) { bytes, count in fuzzTestOneInput(bytes, count) })
