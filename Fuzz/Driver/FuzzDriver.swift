// The libFuzzer entry point: one executable for every target, chosen by CONCORD_FUZZ_TARGET.
// Built only by `make fuzz` (CONCORD_FUZZ=1, `-sanitize=fuzzer,address -parse-as-library`):
// libFuzzer supplies `main`.
import Foundation
import FuzzTargets

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

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzTestOneInput(_ bytes: UnsafePointer<UInt8>?, _ count: Int) -> Int32 {
    let data = bytes.map { Data(bytes: $0, count: count) } ?? Data()
    do {
        _ = try fuzzTarget.run(data, url: fuzzInputURL)
    } catch {
        // A property that must hold did not: crash, so that libFuzzer saves the input.
        fatalError("finding: \(error)")
    }
    return 0
}
